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
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/ingest"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/schema"
	"github.com/inboxd/inboxd/webhook"
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

	cockroach bool
}

// New connects to the database, applies migrations, and prepares the parts. reg holds
// the event handlers.
func New(ctx context.Context, cfg *config.Config, reg *process.Registry, log *slog.Logger) (*Service, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	// Processing workers, the subscriber, the sweeper and the API share the pool.
	if min := int32(cfg.Concurrency + 2*len(cfg.Destinations) + 6); pcfg.MaxConns < min { // +2: push LISTEN and NOTIFY
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
	cockroach := isCockroach(ctx, pool)
	if cfg.SweepGrace == 0 && cockroach {
		// The changefeed delivers RECEIVED rows; the sweeper is only its safety net there.
		cfg.SweepGrace = 30 * time.Second
	}
	log.Info("sweeper", "interval", cfg.SweepInterval, "grace", cfg.SweepGrace)
	return &Service{cfg: cfg, log: log, reg: reg, pool: pool, m: metrics.New(), cockroach: cockroach}, nil
}

// Run serves until ctx is cancelled or a part fails, then shuts down in order.
func (s *Service) Run(ctx context.Context) error {
	defer s.pool.Close()
	cfg := s.cfg

	stompCfg := stompx.Config{Addr: cfg.StompAddr, Login: cfg.StompLogin, Passcode: cfg.StompPasscode, Logger: s.log}
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
	sub, err := ingest.New(ingest.Config{
		Addr: cfg.StompAddr, Login: cfg.StompLogin, Passcode: cfg.StompPasscode,
		Destinations: cfg.Destinations,
		BatchSize:    cfg.BatchSize, Linger: cfg.BatchLinger, Prefetch: cfg.Prefetch, CommitsInFlight: cfg.CommitsInFlight,
		AckMode:      ingest.AckMode(cfg.AckMode),
		MaxBodyBytes: cfg.MaxBodyBytes, DefaultEventType: cfg.DefaultEventType,
		Logger: s.log.With("component", "ingest"), Metrics: s.m,
		OnCommit: func(int) { kick() },
	}, s.pool)
	if err != nil {
		return fmt.Errorf("configuring ingest: %w", err)
	}

	engine := process.New(s.pool, s.reg, process.Config{Concurrency: cfg.Concurrency, MaxAttempts: cfg.MaxAttempts, HandlerTimeout: cfg.HandlerTimeout,
		BatchSize: cfg.ProcessBatchSize},
		s.m, s.log.With("component", "process"))
	sweeper := process.NewSweeper(engine, process.SweeperConfig{Interval: cfg.SweepInterval, Grace: cfg.SweepGrace,
		BatchSize: cfg.ProcessBatchSize, StopTimeout: cfg.ShutdownTimeout / 2}) // half: intake and the API need their share
	if !s.cockroach {
		push = process.NewPush(engine, s.pool)
	}

	apiSrv, err := api.New(api.Config{
		Addr: cfg.HTTPAddr, Pool: s.pool, Publisher: publisher, Destination: cfg.Destinations[0],
		AdminToken: cfg.AdminToken, Logger: s.log.With("component", "api"), Metrics: s.m,
		Ready:           []api.ReadyCheck{{Name: "broker", Check: func(ctx context.Context) error { return brokerReachable(ctx, stompCfg) }}},
		ShutdownTimeout: cfg.ShutdownTimeout,
	})
	if err != nil {
		return fmt.Errorf("configuring the api: %w", err)
	}

	var hook *webhookServer
	if cfg.WebhookAddr != "" {
		if hook, err = s.newWebhook(engine); err != nil {
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

	errs := make(chan error, 5)
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
	start(&intake, "ingest", func() error { return sub.Run(intakeCtx) })
	start(&work, "sweeper", func() error { return sweeper.Run(workCtx) })
	if push != nil {
		start(&work, "push", func() error { return push.Run(workCtx) })
	}
	if hook != nil {
		start(&work, "webhook", func() error { return hook.run(workCtx, cfg.ShutdownTimeout) })
	}
	start(&serving, "api", func() error { return apiSrv.Run(apiCtx) })
	s.log.Info("inboxd running", "destinations", cfg.Destinations, "api", cfg.HTTPAddr, "webhook", cfg.WebhookAddr)

	var runErr error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down: stopping intake")
	case runErr = <-errs:
		s.log.Error("shutting down after a failure", "err", runErr)
	}
	stopIntake()
	intake.Wait()
	s.log.Info("intake stopped; finishing in-flight processing")
	stopWork()
	work.Wait()
	stopAPI()
	serving.Wait()
	close(errs)
	for err := range errs {
		runErr = errors.Join(runErr, err)
	}
	s.log.Info("inboxd stopped")
	return runErr
}

// isCockroach reports whether the database is CockroachDB (and so has a changefeed).
func isCockroach(ctx context.Context, pool *pgxpool.Pool) bool {
	ok, err := feed.NewManager(pool, nil).IsCockroachDB(ctx)
	return err == nil && ok
}

type webhookServer struct {
	srv *http.Server
	ln  net.Listener
	log *slog.Logger
}

func (s *Service) newWebhook(engine *process.Engine) (*webhookServer, error) {
	cfg := s.cfg
	hosts := append([]string{}, cfg.CertHosts...)
	if u, err := url.Parse(cfg.WebhookURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	bundle, err := certs.Load(certs.Config{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, Dir: cfg.CertDir, Hosts: hosts})
	if err != nil {
		return nil, fmt.Errorf("loading webhook TLS certificate: %w", err)
	}
	if len(bundle.Generated) > 0 {
		s.log.Info("generated webhook TLS material", "dir", cfg.CertDir, "files", bundle.Generated,
			"ca_cert_file", cfg.CertDir+"/"+certs.CABase64File)
	}
	auth := ""
	if cfg.WebhookToken != "" {
		auth = "Bearer " + cfg.WebhookToken
	}
	h := webhook.New(webhook.Config{AuthHeader: auth, Sink: cfg.WebhookURL}, engine, s.pool, s.m, s.log.With("component", "webhook"))
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	h.Register(e, WebhookPath)
	ln, err := net.Listen("tcp", cfg.WebhookAddr)
	if err != nil {
		return nil, fmt.Errorf("listening for the webhook on %s: %w", cfg.WebhookAddr, err)
	}
	srv := &http.Server{Handler: e, TLSConfig: bundle.TLSConfig, ReadHeaderTimeout: 10 * time.Second}
	return &webhookServer{srv: srv, ln: tls.NewListener(ln, bundle.TLSConfig), log: s.log}, nil
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
	if err := w.srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting the webhook down: %w", err)
	}
	return nil
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
