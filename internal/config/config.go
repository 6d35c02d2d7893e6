// Package config defines inboxd's settings: command-line flags, each with an
// INBOXD_* environment variable as its fallback.
package config

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is every setting of inboxd.
type Config struct {
	DatabaseURL string

	StompAddr     string
	StompLogin    string
	StompPasscode string
	Destinations  []string

	HTTPAddr   string
	AdminToken string

	WebhookAddr  string
	WebhookToken string
	WebhookURL   string // where the changefeed posts: webhook-https://host:port/path
	CertDir      string
	CertFile     string
	KeyFile      string
	CertHosts    []string

	BatchSize        int
	BatchLinger      time.Duration
	CommitsInFlight  int
	Prefetch         int
	AckMode          string
	MaxBodyBytes     int
	DefaultEventType string

	Concurrency      int
	MaxAttempts      int
	ProcessBatchSize int
	HandlerTimeout   time.Duration
	SweepInterval    time.Duration
	SweepGrace       time.Duration

	ShutdownTimeout time.Duration
	LogFormat       string
	LogLevel        string

	envErrs []string // environment values that did not parse, reported by Validate
}

// setting is one flag with its environment variable.
type setting struct {
	flag, env, usage string
	def              string
	set              func(string) error
}

func settings(c *Config) []setting {
	str := func(p *string) func(string) error { return func(v string) error { *p = v; return nil } }
	list := func(p *[]string) func(string) error {
		return func(v string) error {
			*p = nil
			for _, s := range strings.Split(v, ",") {
				if s = strings.TrimSpace(s); s != "" {
					*p = append(*p, s)
				}
			}
			return nil
		}
	}
	num := func(p *int) func(string) error {
		return func(v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("not a whole number: %q", v)
			}
			*p = n
			return nil
		}
	}
	dur := func(p *time.Duration) func(string) error {
		return func(v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("not a duration (e.g. 250ms, 5s): %q", v)
			}
			*p = d
			return nil
		}
	}
	return []setting{
		{"database-url", "INBOXD_DATABASE_URL", "PostgreSQL or CockroachDB connection URL", "postgres://postgres@127.0.0.1:5432/inboxd?sslmode=disable", str(&c.DatabaseURL)},
		{"stomp-addr", "INBOXD_STOMP_ADDR", "ActiveMQ STOMP address host:port", "127.0.0.1:61613", str(&c.StompAddr)},
		{"stomp-login", "INBOXD_STOMP_LOGIN", "STOMP login", "", str(&c.StompLogin)},
		{"stomp-passcode", "INBOXD_STOMP_PASSCODE", "STOMP passcode", "", str(&c.StompPasscode)},
		{"destination", "INBOXD_DESTINATION", "STOMP destination(s) to consume, comma-separated; the first is where POST /registration publishes", "/queue/registrations", list(&c.Destinations)},
		{"http-addr", "INBOXD_HTTP_ADDR", "REST API listen address", ":8090", str(&c.HTTPAddr)},
		{"admin-token", "INBOXD_ADMIN_TOKEN", "bearer token required by /admin endpoints (empty: no auth)", "", str(&c.AdminToken)},
		{"webhook-addr", "INBOXD_WEBHOOK_ADDR", "changefeed webhook HTTPS listen address (empty: webhook off)", ":8443", str(&c.WebhookAddr)},
		{"webhook-token", "INBOXD_WEBHOOK_TOKEN", "bearer token the changefeed must send (webhook_auth_header)", "", str(&c.WebhookToken)},
		{"webhook-url", "INBOXD_WEBHOOK_URL", "sink URL the changefeed posts to", "webhook-https://localhost:8443/changefeed", str(&c.WebhookURL)},
		{"cert-dir", "INBOXD_CERT_DIR", "directory for the generated webhook CA and certificate", "var/certs", str(&c.CertDir)},
		{"cert-file", "INBOXD_CERT_FILE", "webhook TLS certificate file (PEM); generated when empty", "", str(&c.CertFile)},
		{"key-file", "INBOXD_KEY_FILE", "webhook TLS key file (PEM)", "", str(&c.KeyFile)},
		{"cert-hosts", "INBOXD_CERT_HOSTS", "host names and IPs of the generated certificate, comma-separated", "localhost,127.0.0.1,inboxd", list(&c.CertHosts)},
		{"batch-size", "INBOXD_BATCH_SIZE", "messages per ingest transaction, at most", "500", num(&c.BatchSize)},
		{"batch-linger", "INBOXD_BATCH_LINGER", "how long a partial ingest batch waits for more messages", "5ms", dur(&c.BatchLinger)},
		{"commits-in-flight", "INBOXD_COMMITS_IN_FLIGHT", "ingest batches of one destination written at once (acks stay in order)", "2", num(&c.CommitsInFlight)},
		{"prefetch", "INBOXD_PREFETCH", "broker prefetch per subscription (activemq.prefetchSize); must exceed batch-size", "2000", num(&c.Prefetch)},
		{"ack-mode", "INBOXD_ACK_MODE", "client (one cumulative ack per batch) or client-individual", "client", str(&c.AckMode)},
		{"max-body-bytes", "INBOXD_MAX_BODY_BYTES", "larger message bodies are quarantined", "262144", num(&c.MaxBodyBytes)},
		{"default-event-type", "INBOXD_DEFAULT_EVENT_TYPE", "event type of messages with no event-type header and no type field", "registration", str(&c.DefaultEventType)},
		{"concurrency", "INBOXD_CONCURRENCY", "events processed in parallel (different aggregates)", "8", num(&c.Concurrency)},
		{"max-attempts", "INBOXD_MAX_ATTEMPTS", "handler attempts before an event is DEAD", "5", num(&c.MaxAttempts)},
		{"process-batch-size", "INBOXD_PROCESS_BATCH_SIZE", "events per processing transaction, at most (on CockroachDB, lower it if batches keep conflicting; see README)", "100", num(&c.ProcessBatchSize)},
		{"handler-timeout", "INBOXD_HANDLER_TIMEOUT", "how long one handler run may take; it then fails (the attempt counts) and its transaction is rolled back; also the processing transactions' statement_timeout", "30s", dur(&c.HandlerTimeout)},
		{"sweep-interval", "INBOXD_SWEEP_INTERVAL", "how often the sweeper looks for due retries and undelivered events", "200ms", dur(&c.SweepInterval)},
		{"sweep-grace", "INBOXD_SWEEP_GRACE", "how long a RECEIVED event waits for the changefeed before the sweeper processes it; 0 means none on PostgreSQL and 30s on CockroachDB", "0s", dur(&c.SweepGrace)},
		{"shutdown-timeout", "INBOXD_SHUTDOWN_TIMEOUT", "how long a graceful shutdown may take", "30s", dur(&c.ShutdownTimeout)},
		{"log-format", "INBOXD_LOG_FORMAT", "text or json", "text", str(&c.LogFormat)},
		{"log-level", "INBOXD_LOG_LEVEL", "debug, info, warn or error", "info", str(&c.LogLevel)},
	}
}

// Register defines the flags on fs and returns the Config they fill. Defaults come from
// the environment when set. Call Validate after fs.Parse.
func Register(fs *flag.FlagSet) *Config {
	c := &Config{}
	for _, s := range settings(c) {
		def := s.def
		if v, ok := os.LookupEnv(s.env); ok {
			def = v
		}
		if err := s.set(def); err != nil {
			// A bad environment value is reported by Validate; keep the built-in default.
			_ = s.set(s.def)
			c.envErrs = append(c.envErrs, fmt.Sprintf("%s: %v", s.env, err))
		}
		fs.Func(s.flag, fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def), s.set)
	}
	return c
}

// Validate reports settings that cannot work.
func (c *Config) Validate() error {
	var problems []string
	problems = append(problems, c.envErrs...)
	if c.DatabaseURL == "" {
		problems = append(problems, "database-url is empty")
	}
	if len(c.Destinations) == 0 {
		problems = append(problems, "destination is empty")
	}
	if c.BatchSize < 1 {
		problems = append(problems, "batch-size must be at least 1")
	}
	if c.CommitsInFlight < 1 {
		problems = append(problems, "commits-in-flight must be at least 1")
	}
	if c.Prefetch <= c.BatchSize {
		problems = append(problems, fmt.Sprintf("prefetch (%d) must exceed batch-size (%d), or batches never fill", c.Prefetch, c.BatchSize))
	}
	if c.AckMode != "client" && c.AckMode != "client-individual" {
		problems = append(problems, fmt.Sprintf("ack-mode %q: want client or client-individual", c.AckMode))
	}
	if c.Concurrency < 1 {
		problems = append(problems, "concurrency must be at least 1")
	}
	if c.MaxAttempts < 1 {
		problems = append(problems, "max-attempts must be at least 1")
	}
	if c.ProcessBatchSize < 1 {
		problems = append(problems, "process-batch-size must be at least 1")
	}
	if c.HandlerTimeout < time.Millisecond {
		problems = append(problems, "handler-timeout must be at least 1ms")
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		problems = append(problems, fmt.Sprintf("log-format %q: want text or json", c.LogFormat))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		problems = append(problems, err.Error())
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		problems = append(problems, "cert-file and key-file go together")
	}
	if len(problems) > 0 {
		return fmt.Errorf("invalid configuration: %s", strings.Join(problems, "; "))
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// Logger builds the logger the settings ask for.
func (c *Config) Logger(w io.Writer) *slog.Logger {
	level, _ := parseLevel(c.LogLevel)
	opts := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
