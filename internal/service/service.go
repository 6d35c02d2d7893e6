// Package service assembles inboxd from its parts and runs them: the STOMP ingest
// subscriber, the changefeed webhook (HTTPS), the retry sweeper and the REST API, over
// one database pool.
//
// Shutdown order matters for exactly-once: intake stops first (the subscriber finishes
// its batch in flight, commit then ack, or neither), then the webhook and the sweeper
// finish their transactions, then the API stops, and the pool closes last.
package service

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/httpsec"
	"github.com/inboxd/inboxd/internal/ingest"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/retention"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/schema"
)

// WebhookPath is where the changefeed posts (the path of INBOXD_WEBHOOK_URL).
const WebhookPath = "/changefeed"

// Service is a running inboxd.
type Service struct {
	cfg  *config.Config
	log  *slog.Logger
	reg  *process.Registry
	pool *pgxpool.Pool
	m    *metrics.Metrics
	// cockroach: the database is CockroachDB, so a changefeed feeds the webhook.
	cockroach bool
	// ownsPool: New opened the pool, so Run closes it; NewWithPool's caller owns it.
	ownsPool bool
	routes   []api.Extension
	tp       trace.TracerProvider // nil: otel's global one
}

// ErrShutdownTimeout is returned by Run when the shutdown did not finish within
// INBOXD_SHUTDOWN_TIMEOUT. What was unfinished is left to redelivery (unacked messages,
// unanswered webhook batches) and to the database (a claim is a row lock and ends with its transaction), never half-recorded:
// every step is a transaction.
var ErrShutdownTimeout = errors.New("shutdown did not finish within the shutdown timeout")

// New connects to the database, applies migrations, and prepares the parts. reg holds
// the event handlers. The pool it opens is closed when Run returns.
func New(ctx context.Context, cfg *config.Config, reg *process.Registry, log *slog.Logger, opts Options) (*Service, error) {
	pool, err := OpenPool(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	s, err := NewWithPool(ctx, pool, cfg, reg, log, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// OpenPool connects a pool large enough for every part (see MinConns) and applies
// inboxd's migrations. The caller closes the pool.
func OpenPool(ctx context.Context, cfg *config.Config, log *slog.Logger) (*pgxpool.Pool, error) {
	pcfg, err := cfg.PoolConfig()
	if err != nil {
		return nil, err
	}
	// Processing workers, the subscriber, the sweeper and the API share the pool.
	if min := MinConns(cfg); pcfg.MaxConns < min {
		pcfg.MaxConns = min
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	applied, err := schema.Migrate(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrating (is the database reachable? run inboxd migrate for details): %w", err)
	}
	for _, name := range applied {
		log.Info("applied migration", "name", name)
	}
	return pool, nil
}

// Options are what a program embedding inboxd brings of its own.
type Options struct {
	// Registerer, when not nil, gets inboxd's collectors too (the API's /metrics keeps
	// serving them from inboxd's own registry).
	Registerer prometheus.Registerer
	// Routes are added to the REST API, e.g. the demo's /registration; none by default.
	Routes []api.Extension
	// TracerProvider makes ingest and processing spans; nil means otel's global provider.
	TracerProvider trace.TracerProvider
}

// NewWithPool prepares the parts over a pool the caller owns: it neither migrates (the
// caller does, with schema.Migrate) nor closes the pool. Run may be called again after
// it returns.
func NewWithPool(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, reg *process.Registry, log *slog.Logger, opts Options) (*Service, error) {
	if cfg.StallAfter <= 0 {
		cfg.StallAfter = time.Minute
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if max, min := pool.Config().MaxConns, MinConns(cfg); max < min {
		// Not fatal: parts wait for a connection, and throughput suffers.
		log.Warn("the database pool is smaller than inboxd needs; parts will wait for connections",
			"max_conns", max, "want_at_least", min)
	}
	m := metrics.New()
	if opts.Registerer != nil {
		if err := m.RegisterWith(opts.Registerer); err != nil {
			return nil, err
		}
	}
	crdb := isCockroach(ctx, pool)
	if cfg.SweepGrace == 0 && crdb {
		// The changefeed delivers RECEIVED rows; the sweeper is only its safety net there.
		cfg.SweepGrace = 30 * time.Second
	}
	log.Info("sweeper", "interval", cfg.SweepInterval, "grace", cfg.SweepGrace)
	return &Service{cfg: cfg, log: log, reg: reg, pool: pool, m: m, cockroach: crdb, routes: opts.Routes,
		tp: opts.TracerProvider}, nil
}

// MinConns is how many connections the parts may hold at once.
func MinConns(cfg *config.Config) int32 {
	return int32(cfg.Concurrency + 2*len(cfg.Destinations) + 6) // +2: push LISTEN and NOTIFY
}

// Run serves until ctx is cancelled or a part fails, then shuts down in order, within
// cfg.ShutdownTimeout overall (else ErrShutdownTimeout).
func (s *Service) Run(ctx context.Context) error {
	closePool := s.ownsPool
	defer func() {
		if closePool { // pgxpool.Close waits for connections in use: not after a timeout
			s.pool.Close()
		}
	}()
	cfg := s.cfg

	stompCfg := cfg.Stomp(s.log)
	publisher := stompx.NewPublisher(stompCfg, 2)
	defer publisher.Close()

	// Processing starts as soon as ingest commits: a direct kick in this process, and
	// NOTIFY to the others on PostgreSQL. On CockroachDB the changefeed is the push.
	var push *process.Push
	kick := func() {
		if push != nil {
			push.Notify()
		}
	}
	idSource, err := message.ParseIDSource(cfg.IDSource)
	if err != nil {
		return fmt.Errorf("id-source: %w", err)
	}
	sub, err := ingest.New(ingest.Config{
		Addr: stompCfg.Addr, Login: stompCfg.Login, Passcode: stompCfg.Passcode, TLS: stompCfg.TLS,
		Destinations: cfg.Destinations,
		ClientID:     cfg.ClientID, SubscriptionName: cfg.SubscriptionName, NonDurableTopics: cfg.NonDurableTopics,
		BatchSize: cfg.BatchSize, Linger: cfg.BatchLinger, Prefetch: cfg.Prefetch, CommitsInFlight: cfg.CommitsInFlight,
		AckMode:      ingest.AckMode(cfg.AckMode),
		MaxBodyBytes: cfg.MaxBodyBytes, MaxInflightBytes: int64(cfg.MaxInflightBytes), DefaultEventType: cfg.DefaultEventType,
		IDSource:          idSource,
		MaxStatementBytes: cfg.MaxStatementBytes,
		Logger:            s.log.With("component", "ingest"), Metrics: s.m,
		OnCommit:       func(int) { kick() },
		TracerProvider: s.tp,
	}, s.pool)
	if err != nil {
		return fmt.Errorf("configuring ingest: %w", err)
	}

	immediate := cfg.ImmediateRetries
	if immediate == 0 {
		immediate = -1 // the table's 0 is "none"; the engine's 0 is its default
	}
	engine := process.New(s.pool, s.reg, process.Config{Concurrency: cfg.Concurrency, HandlerTimeout: cfg.HandlerTimeout,
		ImmediateRetries: immediate, MaxAttempts: cfg.MaxAttempts, BaseBackoff: cfg.RetryBaseDelay, MaxBackoff: cfg.RetryMaxDelay,
		BatchSize: cfg.ProcessBatchSize, TracerProvider: s.tp, CockroachDB: s.cockroach},
		s.m, s.log.With("component", "process"))
	sweeper := process.NewSweeper(engine, process.SweeperConfig{Interval: cfg.SweepInterval, Grace: cfg.SweepGrace,
		BatchSize: cfg.ProcessBatchSize, StopTimeout: cfg.ShutdownTimeout / 2}) // half: intake and the API need their share
	if !s.cockroach {
		push = process.NewPush(engine, s.pool)
	}

	mon := newMonitor(s.pool, s.m, sub.Health, cfg.StallAfter, cfg.SweepGrace, s.cockroach && cfg.WebhookAddr != "",
		s.log.With("component", "health"))
	apiSrv, err := s.newAPI(stompCfg, publisher, sub, mon) // nil when HTTPAddr is empty
	if err != nil {
		return err
	}

	// The outbox relay publishes on connections of its own, apart from the API's.
	const relayConns = 4
	relayPub := stompx.NewPublisher(stompCfg, relayConns)
	defer relayPub.Close()
	relay := outbox.NewRelay(s.pool, relayPub, outbox.Config{
		BatchSize: cfg.OutboxBatchSize, Lease: cfg.OutboxLease, PollInterval: cfg.OutboxPollInterval,
		Retention: cfg.OutboxRetention, Parallel: relayConns,
	}, s.m, s.log.With("component", "outbox"))

	var hook *webhookServer
	if cfg.WebhookAddr != "" {
		if hook, err = s.newWebhook(engine, relay); err != nil {
			return err
		}
	}

	// Each stage has its own context so that shutdown can stop intake before processing.
	intakeCtx, stopIntake := context.WithCancel(context.Background())
	workCtx, stopWork := context.WithCancel(context.Background())
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopIntake()
	defer stopWork()
	defer stopAPI()

	errs := make(chan error, 8) // one per part at most
	var intake, work, serving sync.WaitGroup
	start := func(wg *sync.WaitGroup, name string, run func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(); err != nil && !errors.Is(err, context.Canceled) {
				errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	start(&intake, "ingest", func() error {
		// The broker is waited for before intake starts, each try logged; the API runs
		// meanwhile, so /readyz can say what is missing.
		if waitForBroker(intakeCtx, stompCfg, s.log) != nil {
			return nil // stopped while waiting: nothing to clean up
		}
		return sub.Run(intakeCtx)
	})
	start(&work, "sweeper", func() error { return sweeper.Run(workCtx) })
	start(&work, "outbox relay", func() error { return relay.Run(workCtx) })
	if push != nil {
		start(&work, "push", func() error { return push.Run(workCtx) })
	}
	if hook != nil {
		start(&work, "webhook", func() error { return hook.run(workCtx, cfg.ShutdownTimeout) })
	}
	if apiSrv != nil {
		start(&serving, "api", func() error { return apiSrv.Run(apiCtx) })
	}
	serving.Add(1)
	go func() { defer serving.Done(); mon.run(apiCtx) }()
	// On CockroachDB row-level TTL (set by inboxd migrate) deletes expired rows.
	if pruner := retention.New(s.pool, retention.Config{Journal: cfg.Retention, Quarantine: cfg.QuarantineRetention},
		s.log.With("component", "retention")); !s.cockroach && pruner.Enabled() {
		start(&work, "retention", func() error { return pruner.Run(workCtx) })
	}
	s.log.Info("inboxd running", "destinations", cfg.Destinations, "api", cfg.HTTPAddr, "webhook", cfg.WebhookAddr)

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: stopping intake")
	case runErr = <-errs:
		s.log.Error("shutting down after a failure", "err", runErr)
	}
	// One bound for the whole sequence, not one per step. A second signal exits at once
	// (see cli.signalContext).
	done := make(chan struct{})
	go func() {
		defer close(done)
		stopIntake()
		intake.Wait()
		s.log.Info("intake stopped; finishing in-flight processing")
		stopWork()
		work.Wait()
		stopAPI()
		serving.Wait()
	}()
	timer := time.NewTimer(cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		stopIntake()
		stopWork()
		stopAPI()
		closePool = false
		s.log.Error("shutdown timed out; exiting with work unfinished: the broker redelivers unacked messages, and claims end with their transactions",
			"shutdown_timeout", cfg.ShutdownTimeout)
		return errors.Join(runErr, ErrShutdownTimeout)
	}
	close(errs)
	for err := range errs {
		runErr = errors.Join(runErr, err)
	}
	s.log.Info("inboxd stopped")
	return runErr
}

// idField is the payload field of an id source "payload:FIELD", or "" (Run has checked
// the setting already).
func idField(setting string) string {
	src, err := message.ParseIDSource(setting)
	if err != nil {
		return ""
	}
	field, ok := strings.CutPrefix(src.String(), "payload:")
	if !ok {
		return "" // from a header: the payload holds no id to keep
	}
	return field
}

// newAPI builds the REST API and the console, or nothing when cfg.HTTPAddr is empty (a
// program embedding inboxd that serves no API of it).
func (s *Service) newAPI(stompCfg stompx.Config, publisher *stompx.Publisher, sub *ingest.Subscriber, mon *monitor) (*api.Server, error) {
	cfg := s.cfg
	if cfg.HTTPAddr == "" {
		return nil, nil
	}
	var apiPool api.Database = s.pool
	if s.cockroach { // operator transactions begin SERIALIZABLE explicitly, as processing does
		apiPool = database.SerializablePool{Pool: s.pool}
	}
	apiSrv, err := api.New(api.Config{
		Addr: cfg.HTTPAddr, Pool: apiPool, Publisher: publisher, Destination: cfg.Publish(), Extensions: s.routes,
		AdminToken: cfg.AdminToken, ReadToken: cfg.ReadToken, Logger: s.log.With("component", "api"), Metrics: s.m,
		Ready: []api.ReadyCheck{
			{Name: "broker", Check: func(ctx context.Context) error { return brokerReachable(ctx, stompCfg) }},
			{Name: "ingest", Check: func(ctx context.Context) error {
				// Not ready while a destination is unsubscribed: reconnecting, or a standby
				// whose durable subscription another instance holds.
				if !sub.Ready() {
					return errors.New("not subscribed to every destination (reconnecting, or standby while another instance holds the client id)")
				}
				return mon.readyCheck("ingest")(ctx)
			}},
			{Name: "processing", Check: mon.readyCheck("processing")},
			{Name: "feed", Check: mon.readyCheck("feed")},
		},
		ShutdownTimeout: cfg.ShutdownTimeout, MaxEventBytes: cfg.MaxBodyBytes, IDField: idField(cfg.IDSource),
	})
	if err != nil {
		return nil, fmt.Errorf("configuring the api: %w", err)
	}
	// The console at /ui/ shares the API's server and middleware; its data comes from the API.
	if err := console.Register(apiSrv.Echo(), console.Config{CockroachDB: s.cockroach, WebhookURL: cfg.WebhookURL,
		SweepInterval: cfg.SweepInterval, SweepGrace: cfg.SweepGrace}); err != nil {
		return nil, fmt.Errorf("configuring the console: %w", err)
	}
	return apiSrv, nil
}

// isCockroach reports whether the database is CockroachDB (and so has a changefeed).
func isCockroach(ctx context.Context, pool *pgxpool.Pool) bool {
	ok, err := feed.NewManager(pool, nil).IsCockroachDB(ctx)
	return err == nil && ok
}

type webhookServer struct {
	srv *http.Server
	ln  net.Listener
	h   *webhook.Handler
	log *slog.Logger
}

func (s *Service) newWebhook(engine *process.Engine, relay *outbox.Relay) (*webhookServer, error) {
	cfg := s.cfg
	hosts := append([]string{}, cfg.CertHosts...)
	if u, err := url.Parse(cfg.WebhookURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	bundle, err := certs.Load(certs.Config{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, Dir: cfg.CertDir, Hosts: hosts})
	if err != nil {
		return nil, fmt.Errorf("loading webhook TLS certificate: %w", err)
	}
	for _, p := range bundle.Tightened {
		s.log.Warn("narrowed the permissions of the certificate directory to 0700", "path", p)
	}
	if len(bundle.Generated) > 0 {
		s.log.Info("generated webhook TLS material", "dir", cfg.CertDir, "files", bundle.Generated,
			"ca_cert_file", cfg.CertDir+"/"+certs.CABase64File)
	}
	token, created, err := cfg.WebhookAuthToken()
	if err != nil {
		return nil, err
	}
	if created {
		s.log.Info("generated the webhook token; inboxd changefeed create sends it",
			"file", filepath.Join(cfg.CertDir, certs.WebhookTokenFile))
	}
	h := webhook.New(webhook.Config{AuthHeader: "Bearer " + token, Sink: cfg.WebhookURL, MaxBodyBytes: webhook.MaxBodyBytes(cfg.MaxBodyBytes),
		ProcessTimeout: cfg.WebhookProcessTimeout}, engine, s.pool, s.m, s.log.With("component", "webhook"))
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	h.Register(e, WebhookPath)
	// The outbox table's changefeed (CockroachDB) wakes the relay through the same server.
	e.POST(WebhookPath+feed.OutboxSinkSuffix, echo.WrapHandler(outbox.WebhookHandler(relay, "Bearer "+token)))
	ln, err := net.Listen("tcp", cfg.WebhookAddr)
	if err != nil {
		return nil, fmt.Errorf("listening for the webhook on %s: %w", cfg.WebhookAddr, err)
	}
	srv := &http.Server{Handler: e, TLSConfig: bundle.TLSConfig}
	httpsec.DefaultLimits.Apply(srv)
	return &webhookServer{srv: srv, ln: tls.NewListener(ln, bundle.TLSConfig), h: h, log: s.log}, nil
}

// run serves until ctx ends, then lets requests in flight finish: a batch the sink
// sent is either answered 2xx after its outcome is recorded, or not at all (and resent).
func (w *webhookServer) run(ctx context.Context, grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- w.srv.Serve(w.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving the webhook: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	// The batches first: they outlive their requests, and the server waits for the
	// requests that wait for them.
	herr := w.h.Shutdown(sctx)
	if err := w.srv.Shutdown(sctx); err != nil {
		return errors.Join(herr, fmt.Errorf("shutting the webhook down: %w", err))
	}
	return herr
}

// waitForBroker tries the broker until it answers, at least every second, and logs
// each try, so that inboxd started before its broker waits instead of failing.
func waitForBroker(ctx context.Context, cfg stompx.Config, log *slog.Logger) error {
	bo := backoff.Waiter{Policy: backoff.Policy{Initial: 150 * time.Millisecond}} // 100-200 ms, doubling to 0.5-1 s
	for {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := brokerReachable(tctx, cfg)
		cancel()
		if err == nil {
			if bo.Attempt() > 0 {
				log.Info("broker reachable", "addr", cfg.Addr, "tries", bo.Attempt()+1)
			}
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		log.Warn("waiting for the broker", "addr", cfg.Addr, "try", bo.Attempt()+1, "err", err)
		if err := bo.Wait(ctx); err != nil {
			return err
		}
	}
}

// brokerReachable is the readiness check of the broker: a STOMP CONNECT, not just TCP,
// so that a broker that accepts connections but refuses logins counts as down.
func brokerReachable(ctx context.Context, cfg stompx.Config) error {
	cfg.HeartBeat = -1
	conn, err := stompx.Dial(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to the broker at %s: %w", cfg.Addr, err)
	}
	return conn.Disconnect()
}
