package process

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/logx"
	"github.com/inboxd/inboxd/internal/notifier"
)

// PushChannel is the PostgreSQL notification channel that tells every instance that
// entries were journaled.
const PushChannel = "inboxd_journal"

// Push carries "entries were journaled" between inboxd instances on PostgreSQL, where
// there is no changefeed: Notify (after an ingest commit) sends NOTIFY, and every
// instance listening on its notifier kicks its engine's workers. Within one process,
// Engine.Kick alone does it. Lost notifications (a connection drop) cost latency only:
// the workers' interval and the sweeper stay the safety net. CockroachDB has no
// LISTEN/NOTIFY; its changefeed is the push there.
type Push struct {
	e    *Engine
	db   database.DB
	n    *notifier.Notifier
	send chan struct{}
	out  logx.Outage
}

// pushFailed opens an outage of push; the workers' interval and the sweeper go on meanwhile.
const pushFailed = "sending the NOTIFY of push failed; retrying quietly until it works again"

// NewPush builds the push on the engine: it sends NOTIFY on db, and listens on n (the
// process's one LISTEN connection; nil: it only sends).
func NewPush(e *Engine, db database.DB, n *notifier.Notifier) *Push {
	return &Push{e: e, db: db, n: n, send: make(chan struct{}, 1), out: logx.Outage{Log: e.log, What: "NOTIFY push", Level: slog.LevelWarn}}
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

// Run sends the notifications until ctx ends, and meanwhile kicks the engine on each one
// the notifier hears, and each time it listens again (anything journaled while nobody
// listened). The notifier runs on its own.
func (p *Push) Run(ctx context.Context) error {
	if p.n != nil {
		sub := p.n.Listen(PushChannel, func(notifier.Notification) { p.e.Kick() })
		defer sub.Unlisten()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.send:
		}
		// The commits of the next KickLinger share this NOTIFY, as the workers that hear
		// it let kicks gather that long anyway: one NOTIFY per ingest commit was one more
		// transaction per commit at a moderate rate (issue 29). A Notify that came
		// meanwhile followed its commit, which this NOTIFY now covers.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.e.cfg.KickLinger):
		}
		select {
		case <-p.send:
		default:
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := p.db.Exec(sctx, "SELECT pg_notify('"+PushChannel+"', '')")
		cancel()
		switch {
		case ctx.Err() != nil:
		case err != nil:
			p.out.Fail(pushFailed, fmt.Errorf("sending NOTIFY: %w", err))
		default:
			p.out.Recovered("push sends NOTIFY again")
		}
	}
}
