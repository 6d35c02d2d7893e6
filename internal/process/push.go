package process

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/logx"
)

// PushChannel is the PostgreSQL notification channel that tells every instance that
// entries were journaled.
const PushChannel = "inboxd_journal"

// Push carries "entries were journaled" between inboxd instances on PostgreSQL, where
// there is no changefeed: Notify (after an ingest commit) sends NOTIFY, and every
// instance that LISTENs kicks its engine's workers. Within one process, Engine.Kick
// alone does it. Lost notifications (a connection drop) cost latency only: the workers'
// interval and the sweeper stay the safety net. CockroachDB has no LISTEN/NOTIFY; its
// changefeed is the push there.
type Push struct {
	e    *Engine
	pool *pgxpool.Pool
	send chan struct{}
	out  logx.Outage
}

// pushFailed opens an outage of push; the workers' interval and the sweeper go on meanwhile.
const pushFailed = "LISTEN/NOTIFY push failed; retrying quietly until it works again"

// NewPush builds the push on the engine and the pool it uses.
func NewPush(e *Engine, pool *pgxpool.Pool) *Push {
	return &Push{e: e, pool: pool, send: make(chan struct{}, 1), out: logx.Outage{Log: e.log, What: "LISTEN/NOTIFY push", Level: slog.LevelError}}
}

// Notify kicks this instance's workers at once and has every instance's kicked by a
// NOTIFY. Notifications coalesce: it never blocks, and at most one NOTIFY waits to be sent.
func (p *Push) Notify() {
	p.e.Kick()
	select {
	case p.send <- struct{}{}:
	default:
	}
}

// Run sends the notifications and listens for them until ctx ends.
func (p *Push) Run(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.sendLoop(ctx)
	}()
	// About every second (0.5 to 1.5 s) whatever the attempt.
	bo := backoff.Waiter{Policy: backoff.Policy{Initial: time.Second, Max: time.Second, Jitter: 0.5}}
	for ctx.Err() == nil {
		err := p.listen(ctx)
		if ctx.Err() != nil {
			break
		}
		p.out.Fail(pushFailed, err)
		_ = bo.Wait(ctx) // ends early with ctx, which ends the loop
	}
	<-done
	return nil
}

func (p *Push) sendLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.send:
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.pool.Exec(sctx, "SELECT pg_notify('"+PushChannel+"', '')")
		cancel()
		if err != nil && ctx.Err() == nil {
			p.out.Fail(pushFailed, fmt.Errorf("sending NOTIFY: %w", err))
		}
	}
}

// listen holds one connection in LISTEN and kicks the engine on every notification.
func (p *Push) listen(ctx context.Context) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquiring the LISTEN connection: %w", err)
	}
	// The connection carries LISTEN state; never hand it back to the pool.
	defer func() {
		_ = conn.Conn().Close(context.Background())
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+PushChannel); err != nil {
		return fmt.Errorf("LISTEN: %w", err)
	}
	p.out.Recovered("LISTEN/NOTIFY push works again")
	p.e.Kick() // anything journaled while not listening
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return fmt.Errorf("waiting for notifications: %w", err)
		}
		p.e.Kick()
	}
}
