package inboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/lifecycle"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/stompx"
)

// ErrRunning is returned by Run while another Run of the same Client is still going.
var ErrRunning = errors.New("inboxd: the client is already running")

// ErrShutdownTimeout is returned by Run when the shutdown did not finish within
// Config.ShutdownTimeout; test for it with errors.Is, since Run's error wraps it with
// the parts still running ("still running: webhook"). What was unfinished is left to redelivery (unacked messages,
// unanswered webhook batches) and to the database (a claim is a row lock and ends with
// its transaction), never half-recorded: every step is a transaction.
var ErrShutdownTimeout = lifecycle.ErrShutdownTimeout

// Client runs inboxd inside a program: ingest from the broker, processing with the
// handlers given to Handle, the outbox relay, and (unless disabled) the REST API and the
// changefeed webhook, over the caller's pool.
type Client struct {
	pool *pgxpool.Pool
	cfg  Config      // with defaults, validated
	tls  *stompx.TLS // the broker TLS files, read once by New
	log  *slog.Logger
	reg  *process.Registry
	m    *metrics.Metrics
	tp   trace.TracerProvider // nil: otel's global one
	src  message.IDSource     // where Event.Key is read from (cfg.IDSource)

	mu      sync.Mutex
	running bool
}

// New checks cfg and returns a Client that uses pool, which stays the caller's: Run
// never closes it. The database must be migrated first (Migrate). The pool should allow
// cfg.MinPoolSize() connections; Run logs a warning when it has fewer.
func New(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("inboxd: New with a nil pool")
	}
	cfg = cfg.WithDefaults()
	tls, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m := metrics.New()
	if cfg.MetricsRegisterer != nil {
		if err := m.RegisterWith(cfg.MetricsRegisterer); err != nil {
			return nil, fmt.Errorf("inboxd: registering metrics: %w", err)
		}
	}
	src, err := message.ParseIDSource(cfg.IDSource) // validated above
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	return &Client{pool: pool, cfg: cfg, tls: tls, log: log, reg: process.NewRegistry(), m: m, tp: cfg.TracerProvider, src: src}, nil
}

// Handle sets the handler of an event type, replacing any set before, with options such
// as WithRetryPolicy. It may be called while the client runs. An event of a type with no
// handler fails like a handler error: it is retried with backoff, and DEAD after
// MaxAttempts. A h that is also a BatchHandler gets the events of a batch in one call.
// Handle panics on an empty event type or a nil h, wiring bugs.
func (c *Client) Handle(eventType string, h Handler, opts ...HandleOption) {
	if h == nil {
		panic("inboxd: Handle with a nil handler for " + eventType)
	}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(c.reg, eventType)
		}
	}
	c.reg.Replace(eventType, engineHandlerOf(h, c.src))
}

// Handles reports whether an event type has a handler.
func (c *Client) Handles(eventType string) bool {
	_, ok := c.reg.Lookup(eventType)
	return ok
}

// RunOnDead lets the later events of an aggregate run on past a DEAD event of
// eventType, as before parking existed. By default a DEAD event parks its aggregate: the
// events after it wait until an operator retries it or skips it (POST
// /admin/events/{id}/skip). Use it for event types whose order does not matter. The
// DEAD event is recorded as skipped by "inboxd: event type runs on past DEAD".
func (c *Client) RunOnDead(eventType string) { c.reg.RunOnDead(eventType) }

// Run runs inboxd until ctx is cancelled, then shuts down gracefully (intake first, then
// the transactions in flight, then the API, within Config.ShutdownTimeout) and returns
// nil. It returns an error when a part fails or the shutdown times out
// (ErrShutdownTimeout). Run may be called again after it returned.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	c.running = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	a := assembly{pool: c.pool, cfg: c.cfg, tls: c.tls, log: c.log, reg: c.reg, m: c.m, tp: c.tp}
	if err := a.run(ctx); err != nil {
		return fmt.Errorf("inboxd: %w", err)
	}
	return nil
}
