package inboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/service"
	"github.com/inboxd/inboxd/schema"
)

// Config configures a Client. Every field left zero takes the default of the inboxd
// command line (the same table: "inboxd serve -h" lists them, and the README's
// configuration table explains them), so a Config needs only what differs. Destinations
// is the one setting worth always giving.
type Config struct {
	// Logger receives inboxd's logs; nil means slog.Default().
	Logger *slog.Logger
	// MetricsRegisterer, when not nil, gets inboxd's Prometheus collectors (the inboxd_*
	// metrics), e.g. prometheus.DefaultRegisterer.
	MetricsRegisterer prometheus.Registerer
	// TracerProvider makes inboxd's spans: one per ingest batch, linked to each message's
	// trace, and one per event processed, a child of the trace of the message it came in
	// (its traceparent header), whose context the handler gets; what a handler emits
	// carries that span's traceparent. nil means otel's global provider.
	TracerProvider trace.TracerProvider

	// The broker (ActiveMQ over STOMP).
	StompAddr            string
	StompLogin           string
	StompPasscode        string
	StompTLS             bool
	StompCAFile          string
	StompServerName      string
	StompCertFile        string
	StompKeyFile         string
	StompTLSInsecureSkip bool
	// Destinations to consume ("/queue/x", or "/topic/x" with a durable subscription).
	Destinations       []string
	PublishDestination string
	ClientID           string
	SubscriptionName   string
	NonDurableTopics   bool

	// The REST API and the operator console; DisableHTTP serves neither.
	HTTPAddr    string
	DisableHTTP bool
	AdminToken  string
	ReadToken   string

	// The changefeed webhook (CockroachDB); DisableWebhook serves none, which suits
	// PostgreSQL, where processing is pushed on commit.
	WebhookAddr    string
	DisableWebhook bool
	WebhookToken   string
	WebhookURL     string
	CertDir        string
	CertFile       string
	KeyFile        string
	CertHosts      []string
	// WebhookProcessTimeout bounds one changefeed batch's processing, detached from the
	// sink's request (the sink's retries join it).
	WebhookProcessTimeout time.Duration

	// Ingest.
	BatchSize        int
	BatchLinger      time.Duration
	CommitsInFlight  int
	Prefetch         int
	AckMode          string
	MaxBodyBytes     int
	MaxInflightBytes int
	// MaxStatementBytes bounds one SQL statement carrying message bytes (CockroachDB
	// refuses a client message over 16 MiB); max body bytes must fit one.
	MaxStatementBytes int
	DefaultEventType  string
	// IDSource says where a message's event id is read from: "payload:FIELD" (default
	// "payload:id"), "header:NAME", for example "header:message-id" (the JMS message
	// id), or "cloudevents" (only CloudEvents are accepted). Ids need not be UUIDs; the journal keys a non-UUID id by its UUIDv5.
	// CloudEvents are keyed by source and id whatever it says.
	IDSource string

	// Processing.
	Concurrency int
	// The recoverability policy of event types without one of their own (WithRetryPolicy):
	// a failing handler runs again at once ImmediateRetries times (negative: none), then
	// the attempt is recorded and retried after RetryBaseDelay, doubling up to
	// RetryMaxDelay, until MaxAttempts attempts failed and the event is DEAD. The README
	// shows the default schedule.
	ImmediateRetries int
	MaxAttempts      int
	RetryBaseDelay   time.Duration
	RetryMaxDelay    time.Duration
	ProcessBatchSize int
	HandlerTimeout   time.Duration
	SweepInterval    time.Duration
	SweepGrace       time.Duration

	// Retention of PROCESSED and REJECTED journal entries and of quarantined messages; a
	// negative value keeps them forever (zero is the default, as everywhere here).
	Retention           time.Duration
	QuarantineRetention time.Duration

	// The outbox relay.
	OutboxPollInterval time.Duration
	OutboxBatchSize    int
	OutboxLease        time.Duration
	OutboxRetention    time.Duration

	ShutdownTimeout time.Duration
	StallAfter      time.Duration
}

// ErrRunning is returned by Run while another Run of the same Client is still going.
var ErrRunning = errors.New("inboxd: the client is already running")

// Client runs inboxd inside a program: ingest from the broker, processing with the
// handlers given to Handle, the outbox relay, and (unless disabled) the REST API and the
// changefeed webhook, over the caller's pool.
type Client struct {
	pool *pgxpool.Pool
	cfg  *config.Config
	log  *slog.Logger
	reg  *process.Registry
	regr prometheus.Registerer
	tp   trace.TracerProvider
	// routes are the command line's API extensions (the demo's, with -demo); a library
	// caller's Client has none.
	routes []api.Extension

	mu      sync.Mutex
	svc     *service.Service // built by the first Run, which has a context
	running bool
}

// New checks cfg and returns a Client that uses pool, which stays the caller's: Run
// never closes it. The database must be migrated first (Migrate). The pool should allow
// Concurrency + 2×len(Destinations) + 6 connections; Run logs a warning when it has
// fewer.
func New(pool *pgxpool.Pool, cfg Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("inboxd: New with a nil pool")
	}
	c, err := resolve(cfg)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Client{pool: pool, cfg: c, log: log, reg: process.NewRegistry(), regr: cfg.MetricsRegisterer,
		tp: cfg.TracerProvider}, nil
}

// notSettings are the fields of Config that are not settings of the command line's
// table, and the table's settings a library caller gives another way.
var notSettings = map[string]bool{
	"Logger": true, "MetricsRegisterer": true, "TracerProvider": true, "DisableHTTP": true, "DisableWebhook": true,
}

// resolve fills the zero fields of cfg from the command line's defaults
// (config.Defaults, one table) and validates the result as the command line does.
// Fields are matched by name, so a knob added to both structs needs no code here
// (TestConfigCoversEverySetting keeps the two in step).
func resolve(cfg Config) (*config.Config, error) {
	c := config.Defaults()
	src, dst := reflect.ValueOf(cfg), reflect.ValueOf(c).Elem()
	for i := range src.NumField() {
		name := src.Type().Field(i).Name
		if notSettings[name] || src.Field(i).IsZero() {
			continue
		}
		f := dst.FieldByName(name)
		if !f.IsValid() || f.Type() != src.Field(i).Type() {
			panic("inboxd: Config." + name + " has no setting of the same name and type") // a bug, caught by the tests
		}
		f.Set(src.Field(i))
	}
	for _, d := range []*time.Duration{&c.Retention, &c.QuarantineRetention} {
		if *d < 0 {
			*d = 0 // the table's "keep forever"
		}
	}
	if c.ImmediateRetries < 0 {
		c.ImmediateRetries = 0 // the table's "none"
	}
	if cfg.DisableHTTP {
		c.HTTPAddr = ""
	}
	if cfg.DisableWebhook {
		c.WebhookAddr = ""
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	return c, nil
}

// Handle sets the handler of an event type, replacing any set before, with options such
// as WithRetryPolicy. It may be called while the client runs. An event of a type with no
// handler fails like a handler error: it is retried with backoff, and DEAD after
// MaxAttempts.
func (c *Client) Handle(eventType string, h Handler, opts ...HandleOption) {
	applyOptions(c.reg, eventType, opts)
	c.reg.Replace(eventType, h)
}

// RunOnDead lets the later events of an aggregate run on past a DEAD event of
// eventType, as before parking existed. By default a DEAD event parks its aggregate: the
// events after it wait until an operator retries it or skips it (POST
// /admin/events/{id}/skip). Use it for event types whose order does not matter. The
// DEAD event is recorded as skipped by "inboxd: event type runs on past DEAD".
func (c *Client) RunOnDead(eventType string) { c.reg.RunOnDead(eventType) }

// Run runs inboxd until ctx is cancelled, then shuts down gracefully (intake first, then
// the transactions in flight, within Config.ShutdownTimeout) and returns nil. It returns
// an error when a part fails or the shutdown times out. Run may be called again after
// it returned.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.running {
		c.mu.Unlock()
		return ErrRunning
	}
	if c.svc == nil {
		svc, err := service.NewWithPool(ctx, c.pool, c.cfg, c.reg, c.log, service.Options{Registerer: c.regr, Routes: c.routes,
			TracerProvider: c.tp})
		if err != nil {
			c.mu.Unlock()
			return fmt.Errorf("inboxd: %w", err)
		}
		c.svc = svc
	}
	c.running = true
	svc := c.svc
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running = false
		c.mu.Unlock()
	}()
	return svc.Run(ctx)
}

// Migrate creates or updates inboxd's tables in the database of pool (idempotent). On CockroachDB it also sets the default row-level TTL
// of the journal and quarantine; "inboxd migrate" sets other values.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := schema.Migrate(ctx, pool); err != nil {
		return fmt.Errorf("inboxd: migrating: %w", err)
	}
	m := feed.NewManager(pool, nil)
	crdb, err := m.IsCockroachDB(ctx)
	if err != nil {
		return fmt.Errorf("inboxd: migrating: %w", err)
	}
	if !crdb {
		return nil // PostgreSQL: Run deletes expired rows itself
	}
	d := config.Defaults()
	if _, err := m.ApplyRetention(ctx, feed.Retention{Journal: d.Retention, Quarantine: d.QuarantineRetention}); err != nil {
		return fmt.Errorf("inboxd: setting retention: %w", err)
	}
	return nil
}
