package api

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/httpsec"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/logx"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
)

// HeaderContentType is passed to the Publisher, which sets the frame's content type from it.
const HeaderContentType = "content-type"

// Publisher sends a persistent message and returns only once the broker has confirmed
// it (a STOMP receipt). An error means the message may not have been stored.
type Publisher interface {
	Publish(ctx context.Context, destination string, body []byte, headers map[string]string) error
}

// ReadyCheck is one dependency /readyz checks, such as the broker.
type ReadyCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// WatermarkReader reads the changefeed watermarks /journal/stats reports.
type WatermarkReader interface {
	Watermarks(ctx context.Context) ([]journal.Watermark, error)
}

// Config configures the API server.
type Config struct {
	// Addr is where Run listens, e.g. ":8080".
	Addr string
	// TLS, when set, makes Run serve HTTPS.
	TLS *tls.Config

	Pool *pgxpool.Pool // required
	// Dialect is the database's (database.Detect): on CockroachDB operator
	// transactions begin SERIALIZABLE (Dialect.TxPool), and /admin/feed lists the
	// changefeed jobs.
	Dialect   database.Dialect
	Publisher Publisher // required: quarantine reinjection, and extensions that publish
	// Destination is where extensions publish, e.g. "/queue/registrations".
	Destination string // required
	// Extensions add routes of their own, such as the demo's /registration; none by
	// default, so that no door publishes into a program's events unless it opens one.
	Extensions []Extension
	// AdminToken, when set, guards /admin/* (and the journal reads) with
	// "Authorization: Bearer <token>". Unset, /admin/* is served to localhost only, or
	// to nobody when ReadToken is set.
	AdminToken string
	// ReadToken, when set, guards the journal reads (/journal/*, personal data) with
	// "Authorization: Bearer <token>"; the admin token is accepted too. Unset (and no
	// admin token), the journal is served to localhost only.
	ReadToken string
	// AdminTokenSetting and ReadTokenSetting name the settings of the tokens in hints, in
	// the caller's terms (defaults.SettingName). Default INBOXD_ADMIN_TOKEN and
	// INBOXD_READ_TOKEN.
	AdminTokenSetting, ReadTokenSetting string
	// Limits bound slow and large clients; zero fields take httpsec.DefaultLimits.
	Limits httpsec.Limits

	Logger  *slog.Logger     // default slog.Default()
	Metrics *metrics.Metrics // default metrics.New(); served at /metrics

	// Ready lists the checks /readyz runs besides the database (always checked), e.g.
	// {Name: "broker", Check: publisher.Ping}.
	Ready []ReadyCheck
	// Watermarks defaults to reading the feed_watermark table.
	Watermarks WatermarkReader
	// IPExtractor says how to find the client address for logs; default: the TCP peer,
	// which cannot be spoofed. Use echo.ExtractIPFromXFFHeader behind a trusted proxy.
	IPExtractor echo.IPExtractor

	PublishTimeout  time.Duration // default 10s: how long to wait for the broker's receipt
	ReadyTimeout    time.Duration // default 2s per check
	ShutdownTimeout time.Duration // default 10s: how long Run waits for requests in flight
	MaxBodyBytes    int64         // default 1 MiB; larger request bodies get 413
	// MaxEventBytes bounds a payload an operator edits (edit-and-retry): the ingest's
	// body limit, so that an edit cannot make an event no redelivery could be. Default
	// message.DefaultMaxBodyBytes.
	MaxEventBytes int
	// IDField is the payload field ingest reads event ids from when it is not "id"
	// (message.IDSource "payload:FIELD"): an edit must keep it, as it keeps "id".
	IDField string
}

// Server is the REST API.
type Server struct {
	cfg         Config
	db          database.DB // cfg.Pool, or on CockroachDB a SerializablePool over it
	openAPI     []byte      // the core document with the extensions' paths
	e           *echo.Echo
	log         *slog.Logger
	admin, read echo.MiddlewareFunc

	readyMu  sync.Mutex
	readyOut map[string]*logx.Outage // by readiness check; "" is readiness as a whole
}

// New builds the API. It registers every route; Echo returns the echo instance to serve
// it in a test or to mount it elsewhere.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil {
		return nil, errors.New("api: Config.Pool is required")
	}
	if cfg.Publisher == nil {
		return nil, errors.New("api: Config.Publisher is required")
	}
	if cfg.Destination == "" {
		return nil, errors.New("api: Config.Destination is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.New()
	}
	db := cfg.Dialect.TxPool(cfg.Pool)
	if cfg.Watermarks == nil {
		cfg.Watermarks = tableWatermarks{db}
	}
	if cfg.IPExtractor == nil {
		cfg.IPExtractor = echo.ExtractIPDirect()
	}
	cfg.PublishTimeout = defaults.Or(cfg.PublishTimeout, defaults.PublishTimeout)
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 2 * time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = message.DefaultMaxBodyBytes
	}
	doc, err := mergeOpenAPI(openAPIDoc, cfg.Extensions)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s := &Server{cfg: cfg, db: db, log: cfg.Logger, openAPI: doc, readyOut: map[string]*logx.Outage{}}
	cfg.AdminTokenSetting = cmp.Or(cfg.AdminTokenSetting, "INBOXD_ADMIN_TOKEN")
	cfg.ReadTokenSetting = cmp.Or(cfg.ReadTokenSetting, "INBOXD_READ_TOKEN")
	// Once any token is set, no route that reads or changes data is served without one:
	// with a read token alone, /admin has no token of its own and is refused to
	// everyone (the read token does not open it), localhost included.
	anyToken := cfg.AdminToken != "" || cfg.ReadToken != ""
	s.admin = httpsec.Guard{Realm: "inboxd-admin", EnvVar: cfg.AdminTokenSetting, Tokens: []string{cfg.AdminToken},
		RefuseWithoutToken: anyToken, Log: s.log}.Middleware()
	s.read = httpsec.Guard{Realm: "inboxd-read", EnvVar: cfg.ReadTokenSetting, Tokens: []string{cfg.ReadToken, cfg.AdminToken},
		RefuseWithoutToken: anyToken, Log: s.log}.Middleware()
	switch {
	case !anyToken:
		s.log.Warn("no admin token: /admin is served to localhost only; set " + cfg.AdminTokenSetting + " for remote access")
		s.log.Info("no read token: /journal is served to localhost only; set " + cfg.ReadTokenSetting + " for remote access")
	case cfg.AdminToken == "":
		s.log.Warn("a read token but no admin token: /admin is refused to everyone, localhost included; set " + cfg.AdminTokenSetting + " to use it")
	}

	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.IPExtractor = cfg.IPExtractor
	e.HTTPErrorHandler = s.handleError
	cfg.Limits.Apply(e.Server)
	e.StdLogger = httpsec.ErrorLog(s.log) // becomes http.Server.ErrorLog: slog, rate-limited
	// Hand-written rather than echo/middleware, which would pull golang.org/x/time into go.mod.
	e.Use(setRequestID, httpsec.SecurityHeaders, s.logRequests, s.recoverPanics, limitBody(cfg.MaxBodyBytes))
	// Every POST demands Content-Type: application/json (415 otherwise): that is what
	// stops CSRF, as a browser sends no such request cross-site without a preflight.
	e.Use(refuseCrossOrigin) // CSRF, belt and braces: another site's state-changing requests are refused
	post := func(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
		e.POST(path, h, append(m, httpsec.RequireJSON)...)
	}

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(cfg.Metrics.Registry, promhttp.HandlerOpts{Registry: cfg.Metrics.Registry})))
	e.GET("/openapi.json", s.serveOpenAPI)

	e.GET("/", s.index)
	for _, x := range cfg.Extensions {
		if x.Mount != nil {
			x.Mount(Mount{Echo: e, Publisher: cfg.Publisher, Destination: cfg.Destination,
				PublishTimeout: cfg.PublishTimeout, Log: s.log.With("extension", x.Name)})
		}
	}

	e.GET("/journal", s.journalIndex, s.read)
	// The journal holds personal data: reads need the read (or admin) token, or localhost.
	e.GET("/journal/stats", s.journalStats, s.read)
	e.GET("/journal/rates", s.journalRates, s.read)
	// One route serves both /journal/{type}-events and /journal/{id}: Echo allows one
	// parameter child per path segment, so the handler tells them apart by the suffix.
	e.GET("/journal/:ref", s.journalRef, s.read)

	admin := s.admin
	e.GET("/admin/events", s.adminListEvents, admin)
	post("/admin/events/retry", s.adminRetryFilter, admin)
	post("/admin/events/replay", s.adminReplay, admin)
	post("/admin/events/:id/retry", s.adminRetryOne, admin)
	post("/admin/events/:id/skip", s.adminSkipOne, admin)
	post("/admin/events/:id/edit-and-retry", s.adminEditAndRetry, admin)
	e.GET("/admin/replays", s.adminReplayList, admin)
	post("/admin/replays", s.adminReplayPlan, admin)
	e.GET("/admin/replays/:id", s.adminReplayStatus, admin)
	post("/admin/replays/:id/:action", s.adminReplayAction, admin)
	e.GET("/admin/feed", s.adminFeed, admin)
	e.GET("/admin/quarantine", s.adminListQuarantine, admin)
	e.GET("/admin/quarantine/:id/body", s.adminQuarantineBody, admin)
	post("/admin/quarantine/:id/reinject", s.adminReinject, admin)

	s.e = e
	return s, nil
}

// AdminAccess is the access check of /admin/*, for other route groups that change
// state (e.g. a console's actions): the admin token, or localhost when no token at
// all is set.
func (s *Server) AdminAccess() echo.MiddlewareFunc { return s.admin }

// ReadAccess is the access check of /journal/*, for other route groups that show
// journal data: the read or admin token, or localhost when neither is set.
func (s *Server) ReadAccess() echo.MiddlewareFunc { return s.read }

// Echo returns the underlying Echo instance.
func (s *Server) Echo() *echo.Echo { return s.e }

// ServeHTTP serves one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.e.ServeHTTP(w, r) }

// Run listens on Config.Addr and serves until ctx is done, then shuts down gracefully.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("api: listening on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx is done, then stops accepting connections and waits up
// to ShutdownTimeout for requests in flight. It returns nil after a clean shutdown.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	s.e.Listener = ln
	s.log.Info("api listening", "addr", ln.Addr().String(), "tls", s.cfg.TLS != nil)
	errc := make(chan error, 1)
	go func() { errc <- s.e.Start("") }()
	select {
	case err := <-errc:
		return fmt.Errorf("api: serving: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.e.Shutdown(sctx)
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("api: shutting down: %w", err)
	}
	s.log.Info("api stopped")
	return nil
}

type tableWatermarks struct{ db database.DB }

func (t tableWatermarks) Watermarks(ctx context.Context) ([]journal.Watermark, error) {
	return journal.FeedWatermarks(ctx, t.db)
}
