// Package notifier holds inboxd's one LISTEN connection to PostgreSQL, for every topic
// (notification channel) any part of the process listens on: push's "entries were
// journaled" and the outbox relay's "rows were emitted". Subscribers hand it a Handler
// per topic; it LISTENs on one dedicated connection, outside the pool, reconnects with
// backoff.Reconnect after an outage, and tells each subscriber when it is listening
// again, so that the subscriber catches up on what was sent while nobody listened.
//
// Notifications are wake-ups, never the only way work is found: a lost one costs latency
// (the parts' polls and the sweeper stay the safety net). CockroachDB has no LISTEN; its
// changefeed pushes instead, and the process runs no Notifier there.
package notifier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/logx"
)

// ErrNoListen ends Run on a database without LISTEN (CockroachDB): waiting will not fix it.
var ErrNoListen = errors.New("the database has no LISTEN/NOTIFY (CockroachDB: its changefeed pushes instead)")

const (
	// connectTimeout bounds one connection attempt and one round of LISTEN statements.
	connectTimeout = 10 * time.Second
	// closeTimeout bounds the goodbye to the server when a connection is given up.
	closeTimeout = time.Second
)

// pingAfter is how long a quiet connection waits before it is pinged: a connection that
// died without a word (a dropped network path) is found within about this long, not
// after TCP keepalive's minutes. A variable for tests.
var pingAfter = 10 * time.Second

// Notification is one call of a Handler.
type Notification struct {
	Topic   string
	Payload string
	// Resumed marks the call made once the topic is listened to on a connection: the
	// first one, each one after an outage, and the current one for a subscription added
	// later. Whatever was sent before reached nobody, so the subscriber catches up.
	Resumed bool
}

// Handler receives a topic's notifications. It runs on the notifier's goroutine, which
// also serves every other topic: it must not block (push and the relay signal a channel).
type Handler func(Notification)

// Subscription is one Handler on one topic, until Unlisten.
type Subscription struct {
	n     *Notifier
	topic string
	h     Handler
	told  uint64 // the connection its Handler was last told Resumed on; under n.mu
}

// Unlisten removes the subscription; the notifier UNLISTENs a topic with none left. It
// never blocks, and may be called more than once.
func (s *Subscription) Unlisten() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	subs := n.subs[s.topic]
	for i, x := range subs {
		if x == s {
			n.subs[s.topic] = append(subs[:i:i], subs[i+1:]...)
			if len(n.subs[s.topic]) == 0 {
				delete(n.subs, s.topic)
			}
			n.changedLocked()
			return
		}
	}
}

// Notifier is the one LISTEN connection. Build it with New, subscribe with Listen (before
// or while it runs), and run it with Run.
type Notifier struct {
	connConfig *pgx.ConnConfig
	log        *slog.Logger
	out        logx.Outage

	mu      sync.Mutex
	subs    map[string][]*Subscription
	running bool
	// dirty: the subscriptions changed since the connection last caught up with them.
	dirty bool
	// interrupt cancels the wait for a notification under way (nil when there is none),
	// so that a new topic is listened to at once.
	interrupt context.CancelFunc
	conn      uint64 // counts connections, so that a subscriber hears Resumed once on each
}

// New builds a notifier that connects with a copy of connConfig (the pool's, say,
// pool.Config().ConnConfig): its connection is its own, outside any pool. log may be nil.
func New(connConfig *pgx.ConnConfig, log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cc := connConfig.Copy()
	// Interrupting a wait (a new topic, a ping) must leave the connection usable: a
	// deadline does, where a cancel request would cost a connection to the server each time.
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	return &Notifier{connConfig: cc, log: log, subs: map[string][]*Subscription{},
		out: logx.Outage{Log: log, What: "LISTEN connection", Level: slog.LevelWarn}}
}

// Listen calls h with every notification on topic, and with Resumed once the topic is
// listened to (see Notification). It never blocks: the running notifier LISTENs at once,
// one that is not running yet when it starts.
func (n *Notifier) Listen(topic string, h Handler) *Subscription {
	s := &Subscription{n: n, topic: topic, h: h}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.subs[topic] = append(n.subs[topic], s)
	n.changedLocked()
	return s
}

// changedLocked makes the connection catch up with the subscriptions before its next wait.
func (n *Notifier) changedLocked() {
	n.dirty = true
	if n.interrupt != nil {
		n.interrupt()
	}
}

// Run holds the connection until ctx ends, then returns nil: it connects, LISTENs on
// every subscribed topic, and calls the handlers. After an outage (the connection lost,
// or refused) it reconnects with backoff.Reconnect, logging the outage once and its end.
// It returns ErrNoListen on CockroachDB. Run may be called again after it returns, but
// not twice at once.
func (n *Notifier) Run(ctx context.Context) error {
	n.mu.Lock()
	if n.running {
		n.mu.Unlock()
		return errors.New("notifier: Run called while it runs")
	}
	n.running = true
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		n.running = false
		n.mu.Unlock()
	}()

	var bo backoff.Waiter
	for {
		err := n.session(ctx, func() {
			bo.Reset()
			n.out.Recovered("LISTEN connection works again")
		})
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrNoListen):
			return err
		}
		n.out.Fail("LISTEN connection failed; notifications wait until it is back (polls go on), retrying at least every second, logged once per outage", err)
		if bo.Wait(ctx) != nil {
			return nil
		}
	}
}

// session runs one connection until it fails or ctx ends; listening runs once its
// first LISTEN took.
func (n *Notifier) session(ctx context.Context, listening func()) error {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	conn, err := pgx.ConnectConfig(cctx, n.connConfig)
	cancel()
	if err != nil {
		return fmt.Errorf("connecting: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if !database.DialectOf(conn).Listen() {
		return ErrNoListen
	}
	n.mu.Lock()
	n.conn++ // a new connection: every subscriber hears Resumed on it
	id := n.conn
	n.mu.Unlock()
	listened := map[string]bool{}
	for first := true; ; first = false {
		if err := n.catchUp(ctx, conn, listened); err != nil {
			return err
		}
		if first {
			listening()
		}
		n.resume(id, listened)
		if err := n.wait(ctx, conn); err != nil {
			return err
		}
	}
}

// catchUp LISTENs on the topics subscribed since the last call and UNLISTENs those
// left, so that listened matches the subscriptions.
func (n *Notifier) catchUp(ctx context.Context, conn *pgx.Conn, listened map[string]bool) error {
	n.mu.Lock()
	var add, drop []string
	for topic := range n.subs {
		if !listened[topic] {
			add = append(add, topic)
		}
	}
	for topic := range listened {
		if _, ok := n.subs[topic]; !ok {
			drop = append(drop, topic)
		}
	}
	n.dirty = false
	n.mu.Unlock()
	if len(add)+len(drop) == 0 {
		return nil
	}
	if err := listen(ctx, conn, add, drop); err != nil {
		return err
	}
	for _, t := range add {
		listened[t] = true
	}
	for _, t := range drop {
		delete(listened, t)
	}
	return nil
}

// listen sends one round of LISTEN and UNLISTEN statements (PostgreSQL only).
func listen(ctx context.Context, conn *pgx.Conn, add, drop []string) error {
	var b strings.Builder
	for _, t := range add {
		b.WriteString("LISTEN " + pgx.Identifier{t}.Sanitize() + ";")
	}
	for _, t := range drop {
		b.WriteString("UNLISTEN " + pgx.Identifier{t}.Sanitize() + ";")
	}
	lctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if _, err := conn.Exec(lctx, b.String()); err != nil {
		return fmt.Errorf("listening on %v: %w", add, err)
	}
	return nil
}

// resume calls Resumed on every subscriber of a listened topic not yet told on
// connection id. A subscriber whose topic is not listened to yet (it came after
// catchUp) hears it after the next one.
func (n *Notifier) resume(id uint64, listened map[string]bool) {
	var tell []*Subscription
	n.mu.Lock()
	for topic, subs := range n.subs {
		if !listened[topic] {
			continue
		}
		for _, s := range subs {
			if s.told != id {
				s.told = id
				tell = append(tell, s)
			}
		}
	}
	n.mu.Unlock()
	for _, s := range tell {
		s.h(Notification{Topic: s.topic, Resumed: true})
	}
}

// wait waits for one notification and hands it to its topic's handlers. It returns nil
// also when interrupted by a change of subscriptions, or after a quiet pingAfter with a
// ping that answered; an error means the connection is gone.
func (n *Notifier) wait(ctx context.Context, conn *pgx.Conn) error {
	n.mu.Lock()
	if n.dirty {
		n.mu.Unlock()
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, pingAfter)
	defer cancel()
	n.interrupt = cancel
	n.mu.Unlock()
	msg, err := conn.WaitForNotification(wctx)
	n.mu.Lock()
	n.interrupt = nil
	n.mu.Unlock()

	if msg != nil {
		n.deliver(msg)
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case wctx.Err() == nil || conn.IsClosed():
		return fmt.Errorf("waiting for notifications: %w", err)
	case errors.Is(wctx.Err(), context.DeadlineExceeded):
		pctx, cancel := context.WithTimeout(ctx, connectTimeout)
		defer cancel()
		if err := conn.Ping(pctx); err != nil {
			return fmt.Errorf("pinging a quiet connection: %w", err)
		}
	}
	return nil // interrupted: catch up with the subscriptions
}

func (n *Notifier) deliver(msg *pgconn.Notification) {
	n.mu.Lock()
	subs := append([]*Subscription(nil), n.subs[msg.Channel]...)
	n.mu.Unlock()
	for _, s := range subs {
		s.h(Notification{Topic: msg.Channel, Payload: msg.Payload})
	}
}
