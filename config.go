package inboxd

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
)

// Config configures a Client. Every field left zero takes its default from inboxd's one
// table of defaults, the same the command line's flags show ("inboxd serve -h"; the
// README's configuration table explains them), so a Config needs only what differs.
// Destinations is the one setting worth always giving. WithDefaults shows the result.
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
	// ImmediateRetries negative means none, likewise.
	Retention           time.Duration
	QuarantineRetention time.Duration

	// The outbox relay.
	OutboxPollInterval time.Duration
	OutboxBatchSize    int
	OutboxLease        time.Duration
	OutboxRetention    time.Duration

	ShutdownTimeout time.Duration
	StallAfter      time.Duration

	// MigrateAtStart makes Run apply inboxd's pending migrations when it starts, under the
	// migration lock, which needs the schema owner's rights (DDL). Default false: Run
	// changes no schema and only checks that the database's is one this release serves
	// (behind, or ahead by migrations that contract it, is refused), so that a role with
	// SELECT, INSERT, UPDATE and DELETE rights runs it; migrate first with Migrate or
	// "inboxd migrate". Command line: INBOXD_MIGRATE=auto.
	MigrateAtStart bool
}

// MaxBatchSize is the largest BatchSize: one ingest batch numbers its rows inside one
// block of the journal sequence (journal.SequenceBlock).
const MaxBatchSize = journal.SequenceBlock

// WithDefaults returns c with every zero field set to its default (package
// internal/defaults, the one table). Negative retentions and immediate retries stay
// negative: they mean "forever" and "none".
func (c Config) WithDefaults() Config {
	or := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	or(&c.StompAddr, defaults.StompAddr)
	or(&c.ClientID, defaults.ClientID)
	or(&c.SubscriptionName, defaults.SubscriptionName)
	or(&c.HTTPAddr, defaults.HTTPAddr)
	or(&c.WebhookAddr, defaults.WebhookAddr)
	or(&c.WebhookURL, defaults.WebhookURL)
	or(&c.CertDir, defaults.CertDir)
	or(&c.AckMode, defaults.AckMode)
	or(&c.IDSource, defaults.IDSource)
	if len(c.Destinations) == 0 {
		c.Destinations = []string{defaults.Destination}
	}
	if len(c.CertHosts) == 0 {
		c.CertHosts = strings.Split(defaults.CertHosts, ",")
	}
	c.WebhookProcessTimeout = defaults.Or(c.WebhookProcessTimeout, defaults.WebhookProcessTimeout)

	c.BatchSize = defaults.Or(c.BatchSize, defaults.BatchSize)
	c.BatchLinger = defaults.Or(c.BatchLinger, defaults.BatchLinger)
	c.CommitsInFlight = defaults.Or(c.CommitsInFlight, defaults.CommitsInFlight)
	c.Prefetch = defaults.Or(c.Prefetch, defaults.Prefetch)
	c.MaxBodyBytes = defaults.Or(c.MaxBodyBytes, defaults.MaxBodyBytes)
	c.MaxInflightBytes = defaults.Or(c.MaxInflightBytes, defaults.MaxInflightBytes)
	c.MaxStatementBytes = defaults.Or(c.MaxStatementBytes, defaults.MaxStatementBytes)

	c.Concurrency = defaults.Or(c.Concurrency, defaults.Concurrency())
	if c.ImmediateRetries == 0 {
		c.ImmediateRetries = defaults.ImmediateRetries
	}
	c.MaxAttempts = defaults.Or(c.MaxAttempts, defaults.MaxAttempts)
	c.RetryBaseDelay = defaults.Or(c.RetryBaseDelay, defaults.RetryBaseDelay)
	c.RetryMaxDelay = defaults.Or(c.RetryMaxDelay, defaults.RetryMaxDelay)
	c.ProcessBatchSize = defaults.Or(c.ProcessBatchSize, defaults.ProcessBatchSize)
	c.HandlerTimeout = defaults.Or(c.HandlerTimeout, defaults.HandlerTimeout)
	c.SweepInterval = defaults.Or(c.SweepInterval, defaults.SweepInterval)
	// SweepGrace: zero means none on PostgreSQL and defaults.SweepGraceCockroachDB on
	// CockroachDB, decided once the database is known.

	if c.Retention == 0 {
		c.Retention = defaults.Retention
	}
	if c.QuarantineRetention == 0 {
		c.QuarantineRetention = defaults.QuarantineRetention
	}
	c.OutboxPollInterval = defaults.Or(c.OutboxPollInterval, defaults.OutboxPollInterval)
	c.OutboxBatchSize = defaults.Or(c.OutboxBatchSize, defaults.OutboxBatchSize)
	c.OutboxLease = defaults.Or(c.OutboxLease, defaults.OutboxLease)
	c.OutboxRetention = defaults.Or(c.OutboxRetention, defaults.OutboxRetention)

	c.ShutdownTimeout = defaults.Or(c.ShutdownTimeout, defaults.ShutdownTimeout)
	c.StallAfter = defaults.Or(c.StallAfter, defaults.StallAfter)
	return c
}

// ConfigError lists every setting of a Config that cannot work.
type ConfigError struct {
	Problems []string
}

func (e *ConfigError) Error() string {
	return "invalid configuration: " + strings.Join(e.Problems, "; ")
}

// Validate reports (as a *ConfigError) the settings of c.WithDefaults() that cannot
// work, named as the command line's flags are. It reads the broker TLS files.
func (c Config) Validate() error {
	_, err := c.WithDefaults().validate()
	return err
}

// validate is Validate on a Config with its defaults, returning the broker TLS it
// loaded, so that New reads the files once.
func (c Config) validate() (*stompx.TLS, error) {
	var problems []string
	tls, err := c.stompTLS()
	if err != nil {
		problems = append(problems, err.Error())
	}
	for _, v := range []struct{ name, value string }{{"client-id", c.ClientID}, {"subscription-name", c.SubscriptionName}} {
		if v.value != "" && !validName(v.value) {
			problems = append(problems, fmt.Sprintf("%s %q: use 1 to 100 letters, digits, '.', '_', ':' or '-'", v.name, v.value))
		}
	}
	if c.PublishDestination != "" && !strings.HasPrefix(c.PublishDestination, "/queue/") && !strings.HasPrefix(c.PublishDestination, "/topic/") {
		problems = append(problems, fmt.Sprintf("publish-destination %q: want /queue/… or /topic/…", c.PublishDestination))
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		problems = append(problems, fmt.Sprintf("batch-size must be between 1 and %d", MaxBatchSize))
	}
	if c.Prefetch <= c.BatchSize {
		problems = append(problems, fmt.Sprintf("prefetch (%d) must exceed batch-size (%d), or batches never fill", c.Prefetch, c.BatchSize))
	}
	if c.AckMode != "client" && c.AckMode != "client-individual" {
		problems = append(problems, fmt.Sprintf("ack-mode %q: want client or client-individual", c.AckMode))
	}
	if err := journal.CheckBodyBound(c.MaxBodyBytes, c.MaxStatementBytes); err != nil {
		problems = append(problems, strings.ReplaceAll(err.Error(), "max body bytes", "max-body-bytes"))
	}
	if _, err := message.ParseIDSource(c.IDSource); err != nil {
		problems = append(problems, err.Error())
	}
	if c.MaxInflightBytes < c.MaxBodyBytes {
		problems = append(problems, fmt.Sprintf("max-inflight-bytes (%d) must be at least max-body-bytes (%d)", c.MaxInflightBytes, c.MaxBodyBytes))
	}
	if c.RetryBaseDelay < time.Millisecond {
		problems = append(problems, "retry-base-delay must be at least 1ms")
	}
	if c.RetryMaxDelay < c.RetryBaseDelay {
		problems = append(problems, fmt.Sprintf("retry-max-delay (%s) must be at least retry-base-delay (%s)", c.RetryMaxDelay, c.RetryBaseDelay))
	}
	for name, d := range map[string]time.Duration{"retention": c.Retention, "quarantine-retention": c.QuarantineRetention} {
		// Row-level TTL on CockroachDB takes whole seconds.
		if d > 0 && (d < time.Second || d%time.Second != 0) {
			problems = append(problems, fmt.Sprintf("%s %s: want 0 or a whole number of seconds, at least 1s", name, d))
		}
	}
	if c.OutboxLease < time.Second {
		problems = append(problems, "outbox-lease must be at least 1s")
	}
	if c.HandlerTimeout < time.Millisecond {
		problems = append(problems, "handler-timeout must be at least 1ms")
	}
	if c.WebhookProcessTimeout < c.HandlerTimeout {
		problems = append(problems, fmt.Sprintf("webhook-process-timeout (%s) must be at least handler-timeout (%s): a batch must outlast one handler that runs to its timeout, or it is cancelled at every delivery",
			c.WebhookProcessTimeout, c.HandlerTimeout))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		problems = append(problems, "cert-file and key-file go together")
	}
	if !c.DisableWebhook {
		// What inboxd changefeed create would refuse, said at start.
		if _, err := feed.ParseSinkURL(c.WebhookURL); err != nil {
			problems = append(problems, "webhook-url: "+strings.TrimPrefix(err.Error(), feed.ErrInvalidOptions.Error()+": "))
		}
	}
	if len(problems) > 0 {
		return nil, &ConfigError{Problems: problems}
	}
	return tls, nil
}

// validName bounds a client id or subscription name: the broker keys durable
// subscriptions by them, and operators type them.
func validName(s string) bool {
	if len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:-", r)) {
			return false
		}
	}
	return s != ""
}

// MinPoolSize is how many connections the parts of a Client with c may hold from its
// pool at once: the processing workers, two ingest writes per destination (commits in
// flight), the sweeper, the relay, the API, the health monitor and push's NOTIFY. On
// PostgreSQL the notifier's LISTEN is one more connection, outside the pool.
func (c Config) MinPoolSize() int32 {
	c = c.WithDefaults()
	return int32(c.Concurrency + 2*len(c.Destinations) + 5)
}

// publish is where the API publishes (the demo's POST /registration).
func (c Config) publish() string {
	if c.PublishDestination != "" {
		return c.PublishDestination
	}
	return c.Destinations[0]
}

// stompTLS checks the broker TLS settings and reads their files: nil when StompTLS is
// off.
func (c Config) stompTLS() (*stompx.TLS, error) {
	if !c.StompTLS {
		var set []string
		for _, s := range []struct{ name, v string }{
			{"stomp-ca-file", c.StompCAFile}, {"stomp-server-name", c.StompServerName},
			{"stomp-cert-file", c.StompCertFile}, {"stomp-key-file", c.StompKeyFile},
		} {
			if s.v != "" {
				set = append(set, s.name)
			}
		}
		if c.StompTLSInsecureSkip {
			set = append(set, "stomp-tls-insecure-skip-verify")
		}
		if len(set) > 0 {
			// A TLS setting without TLS is a mistake that would otherwise send the
			// passcode and every message in clear: refuse it.
			return nil, fmt.Errorf("%s set but stomp-tls is off; set INBOXD_STOMP_TLS=true (inboxd never falls back to plaintext)",
				strings.Join(set, ", "))
		}
		return nil, nil
	}
	if c.StompTLSInsecureSkip && c.StompCAFile != "" {
		return nil, errors.New("stomp-tls-insecure-skip-verify makes stomp-ca-file pointless; drop one")
	}
	return stompx.LoadTLS(stompx.TLSFiles{
		CAFile: c.StompCAFile, ServerName: c.StompServerName,
		CertFile: c.StompCertFile, KeyFile: c.StompKeyFile, InsecureSkipVerify: c.StompTLSInsecureSkip,
	})
}

// stomp is how every part reaches the broker (ingest, the publishers, the readiness
// check): one stompx.Config.
func (c Config) stomp(tls *stompx.TLS, log *slog.Logger) stompx.Config {
	if c.StompTLSInsecureSkip {
		log.Warn("INSECURE: broker TLS certificate verification is off (stomp-tls-insecure-skip-verify)")
	}
	return stompx.Config{Addr: c.StompAddr, Login: c.StompLogin, Passcode: c.StompPasscode, TLS: tls, Logger: log}
}
