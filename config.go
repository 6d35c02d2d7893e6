package inboxd

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
// table of defaults (the same the command line's flags show, "inboxd serve -h"), so a
// Config needs only what differs; WithDefaults shows the result. Each field's doc says
// "Defaults to X." and names the command line's environment variable, and
// TestConfigDocs holds those to the table. Where a setting can be "none" or "forever",
// -1 (any negative value) says so, and zero takes the default.
type Config struct {
	// Logger receives inboxd's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// MetricsRegisterer gets inboxd's Prometheus collectors (the inboxd_* metrics), e.g.
	// prometheus.DefaultRegisterer. Defaults to none: the metrics are not registered.
	MetricsRegisterer prometheus.Registerer
	// TracerProvider makes inboxd's spans: one per ingest batch, linked to each message's
	// trace, and one per event processed, a child of the trace of the message it came in
	// (its traceparent header), whose context the handler gets; what a handler emits
	// carries that span's traceparent. Defaults to otel's global provider.
	TracerProvider trace.TracerProvider

	// StompAddr is the broker's STOMP address, host:port (INBOXD_STOMP_ADDR): ActiveMQ,
	// or RabbitMQ's STOMP plugin. Defaults to "127.0.0.1:61613".
	StompAddr string
	// StompHost is the STOMP host header of CONNECT: RabbitMQ's virtual host
	// (INBOXD_STOMP_HOST). Defaults to none: "/" when Broker is rabbitmq, else the host
	// part of StompAddr, which ActiveMQ ignores.
	StompHost string
	// Broker is the broker's STOMP dialect: "activemq", "rabbitmq", or "auto", detected
	// from the CONNECTED frame's server header (INBOXD_BROKER). Defaults to "auto".
	Broker string
	// StompLogin is the STOMP login (INBOXD_STOMP_LOGIN). Defaults to none.
	StompLogin string
	// StompPasscode is the STOMP passcode (INBOXD_STOMP_PASSCODE). Defaults to none.
	StompPasscode string
	// StompTLS speaks TLS to the broker (ActiveMQ's stomp+ssl), never falling back to
	// plaintext (INBOXD_STOMP_TLS). Defaults to false.
	StompTLS bool
	// StompCAFile is the PEM CA bundle that signs the broker's certificate
	// (INBOXD_STOMP_CA_FILE). Defaults to none: the system pool.
	StompCAFile string
	// StompServerName is the name the broker's certificate must carry
	// (INBOXD_STOMP_SERVER_NAME). Defaults to none: the host of StompAddr.
	StompServerName string
	// StompCertFile is the client certificate (PEM) for mutual TLS
	// (INBOXD_STOMP_CERT_FILE). Defaults to none.
	StompCertFile string
	// StompKeyFile is the client key (PEM) for mutual TLS, not world-readable
	// (INBOXD_STOMP_KEY_FILE). Defaults to none.
	StompKeyFile string
	// StompTLSInsecureSkip accepts any broker certificate: INSECURE, anyone on the path
	// can read and change messages (INBOXD_STOMP_TLS_INSECURE_SKIP_VERIFY). Defaults to
	// false.
	StompTLSInsecureSkip bool
	// StompHeartBeat is the STOMP heart-beat interval, both ways: a broker that falls
	// silent (a blackholed path) is noticed within 1.5 of them; -1 turns heart-beats
	// off (INBOXD_STOMP_HEART_BEAT). Defaults to 10s.
	StompHeartBeat time.Duration
	// Destinations are consumed: "/queue/x", or "/topic/x" with a durable subscription
	// (INBOXD_DESTINATION, comma-separated). Defaults to "/queue/registrations".
	Destinations []string
	// PublishDestination is where the API's POST /registration publishes (the command
	// line's demo) (INBOXD_PUBLISH_DESTINATION). Defaults to none: the first of
	// Destinations.
	PublishDestination string
	// ClientID is the durable topic subscriptions' client id: the connection of
	// /topic/T connects as <ClientID>.T. Keep it stable, one per application
	// (INBOXD_CLIENT_ID). Defaults to "inboxd".
	ClientID string
	// SubscriptionName is the durable topic subscriptions' activemq.subscriptionName.
	// Keep it stable (INBOXD_SUBSCRIPTION_NAME). Defaults to "inboxd".
	SubscriptionName string
	// NonDurableTopics subscribes /topic/ destinations non-durably, losing every event
	// published while inboxd is disconnected (INBOXD_NON_DURABLE_TOPICS). Defaults to
	// false.
	NonDurableTopics bool

	// HTTPAddr is where the REST API and the operator console listen
	// (INBOXD_HTTP_ADDR, whose default is ":8090", every interface). Defaults to
	// "127.0.0.1:8090": loopback, for a program embedding inboxd.
	HTTPAddr string
	// DisableHTTP serves neither the REST API nor the console (INBOXD_HTTP_ADDR empty).
	// Defaults to false.
	DisableHTTP bool
	// AdminToken is the bearer token /admin requires and /journal accepts
	// (INBOXD_ADMIN_TOKEN). Defaults to none: /admin is served to localhost only.
	AdminToken string
	// ReadToken is the bearer token the /journal reads require, which hold personal data
	// (INBOXD_READ_TOKEN). Defaults to none: with no AdminToken either, they are served
	// to localhost only.
	ReadToken string

	// WebhookAddr is where the changefeed webhook listens, HTTPS (INBOXD_WEBHOOK_ADDR,
	// whose default is ":8443"). Defaults to none: the webhook runs on CockroachDB only,
	// whose changefeeds need it, at ":8443"; set it to serve one on PostgreSQL too.
	WebhookAddr string
	// DisableWebhook serves no webhook, even on CockroachDB (INBOXD_WEBHOOK_ADDR empty).
	// Defaults to false.
	DisableWebhook bool
	// WebhookToken is the bearer token the changefeed must send (INBOXD_WEBHOOK_TOKEN).
	// Defaults to none: generated once into CertDir/webhook-token (0600).
	WebhookToken string
	// WebhookURL is the sink URL the changefeed posts to (INBOXD_WEBHOOK_URL). Defaults
	// to "webhook-https://localhost:8443/changefeed".
	WebhookURL string
	// CertDir holds the webhook's generated CA, certificate and token
	// (INBOXD_CERT_DIR, whose default is "var/certs"). Defaults to none: "var/certs"
	// when a webhook runs.
	CertDir string
	// CertFile is the webhook's own TLS certificate (PEM), with KeyFile
	// (INBOXD_CERT_FILE). Defaults to none: generated into CertDir.
	CertFile string
	// KeyFile is the webhook's own TLS key (PEM) (INBOXD_KEY_FILE). Defaults to none.
	KeyFile string
	// CertHosts are the host names and IPs of the generated certificate
	// (INBOXD_CERT_HOSTS, comma-separated). Defaults to "localhost,127.0.0.1,inboxd".
	CertHosts []string
	// WebhookProcessTimeout bounds one changefeed batch's processing, detached from the
	// sink's request (the sink's retries join it); at least HandlerTimeout
	// (INBOXD_WEBHOOK_PROCESS_TIMEOUT). Defaults to 5m.
	WebhookProcessTimeout time.Duration

	// BatchSize is the most messages one ingest transaction takes, at most MaxBatchSize
	// (INBOXD_BATCH_SIZE). Defaults to 500.
	BatchSize int
	// BatchLinger is how long a partial ingest batch waits for more messages
	// (INBOXD_BATCH_LINGER). Defaults to 5ms.
	BatchLinger time.Duration
	// CommitsInFlight is how many ingest batches of one destination are written at once;
	// acks stay in order (INBOXD_COMMITS_IN_FLIGHT). Defaults to 2.
	CommitsInFlight int
	// Prefetch is the broker's prefetch per subscription (activemq.prefetchSize), in
	// messages; it must exceed BatchSize (INBOXD_PREFETCH). Defaults to 2000.
	Prefetch int
	// AckMode is "client" (one cumulative ack per batch) or "client-individual"
	// (INBOXD_ACK_MODE). Defaults to "client".
	AckMode string
	// MaxBodyBytes bounds a message body, in bytes: larger ones are quarantined as
	// too_large (INBOXD_MAX_BODY_BYTES). Defaults to 262144.
	MaxBodyBytes int
	// MaxInflightBytes bounds the message bytes one destination holds unacked; past it
	// the prefetch shrinks to fit the largest bodies (INBOXD_MAX_INFLIGHT_BYTES).
	// Defaults to 67108864.
	MaxInflightBytes int
	// MaxStatementBytes bounds one SQL statement carrying message bytes, in bytes
	// (CockroachDB refuses a client message over 16 MiB); MaxBodyBytes must fit one
	// (INBOXD_MAX_STATEMENT_BYTES). Defaults to 8388608.
	MaxStatementBytes int
	// DefaultEventType is the type of messages with no event-type header and no "type"
	// field (INBOXD_DEFAULT_EVENT_TYPE). Defaults to none: they are quarantined as
	// missing_type.
	DefaultEventType string
	// IDSource says where a message's event id (Event.Key) is read from: "payload:FIELD",
	// "header:NAME", for example "header:message-id" (the JMS message id), or
	// "cloudevents" (only CloudEvents are accepted). Ids need not be UUIDs: the journal
	// keys an event by JournalID(id). CloudEvents are keyed by source and id whatever it
	// says (INBOXD_ID_SOURCE). Defaults to "payload:id".
	IDSource string

	// Concurrency is how many processing transactions (batches of different aggregates)
	// run at once (INBOXD_CONCURRENCY). Defaults to the number of CPUs, at least 2.
	Concurrency int
	// ImmediateRetries is how many more times a failing handler runs at once, within one
	// attempt, before the attempt is recorded as failed; -1 means none
	// (INBOXD_IMMEDIATE_RETRIES). Defaults to 2. It, MaxAttempts, RetryBaseDelay and
	// RetryMaxDelay are the policy of event types without one of their own
	// (WithRetryPolicy); docs/recoverability.md shows the default schedule.
	ImmediateRetries int
	// NoHandler is what becomes of an event whose type has no handler (INBOXD_NO_HANDLER):
	// "retry", a failed attempt retried like any other until DEAD, so that a handler
	// deployed meanwhile takes it; "reject", REJECTED at once; "park", recorded FAILED
	// once and then held, attempted again only when a Client starts with a handler for
	// its type. docs/recoverability.md says why retry is the default. Defaults to "retry".
	NoHandler string
	// MaxAttempts is the number of recorded attempts after which a failing event is DEAD
	// (INBOXD_MAX_ATTEMPTS). Defaults to 40.
	MaxAttempts int
	// RetryBaseDelay is the delay after the first failed attempt; it doubles per attempt
	// up to RetryMaxDelay, ±10% (INBOXD_RETRY_BASE_DELAY). Defaults to 1s.
	RetryBaseDelay time.Duration
	// RetryMaxDelay is the longest delay between two attempts (INBOXD_RETRY_MAX_DELAY).
	// Defaults to 10m.
	RetryMaxDelay time.Duration
	// ProcessBatchSize is the most events one processing transaction takes
	// (INBOXD_PROCESS_BATCH_SIZE). Defaults to 100.
	ProcessBatchSize int
	// HandlerTimeout bounds one handler run; an overrun is a failed attempt. It is also
	// the processing transactions' statement_timeout, at least 5s, since the engine's own
	// statements run under it too (INBOXD_HANDLER_TIMEOUT). Defaults to 30s.
	HandlerTimeout time.Duration
	// SweepInterval is how often the sweeper looks for due retries and undelivered
	// events (INBOXD_SWEEP_INTERVAL). Defaults to 200ms.
	SweepInterval time.Duration
	// SweepGrace is how long a RECEIVED event waits for push (the changefeed) before the
	// sweeper takes it (INBOXD_SWEEP_GRACE). Defaults to none on PostgreSQL, whose push
	// is in-process, and 30s on CockroachDB.
	SweepGrace time.Duration

	// Retention is how long PROCESSED and REJECTED journal entries are kept after their
	// last update: the dedup window; -1 keeps them forever, and it takes whole seconds
	// (INBOXD_RETENTION). Defaults to 168h.
	Retention time.Duration
	// QuarantineRetention is how long quarantined messages are kept; -1 keeps them
	// forever (INBOXD_QUARANTINE_RETENTION). Defaults to 720h.
	QuarantineRetention time.Duration

	// OutboxPollInterval is how often the outbox relay looks for unsent messages when
	// nothing woke it; PostgreSQL wakes it on commit (INBOXD_OUTBOX_POLL_INTERVAL).
	// Defaults to 1s.
	OutboxPollInterval time.Duration
	// OutboxBatchSize is the most outbox messages one relay pass claims
	// (INBOXD_OUTBOX_BATCH_SIZE). Defaults to 100.
	OutboxBatchSize int
	// OutboxLease is how long a relay holds the messages it claimed before another
	// instance may take them; at least 1s (INBOXD_OUTBOX_LEASE). Defaults to 30s.
	OutboxLease time.Duration
	// OutboxRetention is how long sent outbox messages are kept before deletion
	// (INBOXD_OUTBOX_RETENTION). Defaults to 24h.
	OutboxRetention time.Duration
	// OutboxRetryMaxDelay is the longest wait before the relay publishes again a message
	// the broker refused; the wait starts at 1s and doubles per attempt, and the later
	// messages of its group wait with it (INBOXD_OUTBOX_RETRY_MAX_DELAY). Defaults to 5m.
	OutboxRetryMaxDelay time.Duration

	// ShutdownTimeout bounds the whole graceful shutdown (INBOXD_SHUTDOWN_TIMEOUT).
	// Defaults to 30s.
	ShutdownTimeout time.Duration
	// StallAfter is how long ingest, processing or the feed may go without progress
	// while work waits before /readyz reports them stuck (INBOXD_STALL_AFTER). Defaults
	// to 1m.
	StallAfter time.Duration

	// MigrateAtStart makes Run apply inboxd's pending migrations when it starts, under the
	// migration lock, and on CockroachDB set the row-level TTL of Retention (the attempt
	// history's) and QuarantineRetention, as Migrate with WithRetention does; it needs
	// the schema owner's rights (DDL) (INBOXD_MIGRATE=auto).
	// Defaults to false: Run changes no schema and only checks that the database's is one
	// this release serves (behind, or ahead by migrations that contract it, is refused),
	// so that a role with SELECT, INSERT, UPDATE and DELETE rights runs it; migrate first
	// with Migrate or "inboxd migrate".
	MigrateAtStart bool
}

// MaxBatchSize is the largest BatchSize: one ingest batch numbers its rows inside one
// block of the journal sequence (journal.SequenceBlock).
const MaxBatchSize = journal.SequenceBlock

// WithDefaults returns c with every zero field set to its default (package
// internal/defaults, the one table). A negative retention or ImmediateRetries stays
// negative: it means "forever" or "none".
func (c Config) WithDefaults() Config {
	or := func(p *string, def string) {
		if *p == "" {
			*p = def
		}
	}
	or(&c.StompAddr, defaults.StompAddr)
	or(&c.Broker, defaults.Broker)
	or(&c.ClientID, defaults.ClientID)
	or(&c.SubscriptionName, defaults.SubscriptionName)
	or(&c.HTTPAddr, defaults.LibraryHTTPAddr)
	// WebhookAddr and CertDir stay empty: the webhook is served on CockroachDB only
	// (Run sets them then), unless WebhookAddr asks for it.
	or(&c.WebhookURL, defaults.WebhookURL)
	or(&c.AckMode, defaults.AckMode)
	or(&c.IDSource, defaults.IDSource)
	or(&c.NoHandler, defaults.NoHandler)
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
	c.OutboxRetryMaxDelay = defaults.Or(c.OutboxRetryMaxDelay, defaults.OutboxRetryMaxDelay)

	c.ShutdownTimeout = defaults.Or(c.ShutdownTimeout, defaults.ShutdownTimeout)
	if c.StompHeartBeat == 0 { // negative: off
		c.StompHeartBeat = defaults.StompHeartBeat
	}
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
	if _, err := stompx.ParseBroker(c.Broker); err != nil {
		problems = append(problems, "broker: "+err.Error())
	}
	for _, v := range []struct{ name, value string }{{"client-id", c.ClientID}, {"subscription-name", c.SubscriptionName}} {
		if v.value != "" && !validName(v.value) {
			problems = append(problems, fmt.Sprintf("%s %q: use 1 to 100 letters, digits, '.', '_', ':' or '-'", v.name, v.value))
		}
	}
	if c.PublishDestination != "" && message.CheckDestination(c.PublishDestination) != nil {
		problems = append(problems, fmt.Sprintf("publish-destination %q: want /queue/…, /topic/… or /amq/queue/…", c.PublishDestination))
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		problems = append(problems, fmt.Sprintf("batch-size must be between 1 and %d", MaxBatchSize))
	}
	if c.Prefetch <= c.BatchSize {
		problems = append(problems, fmt.Sprintf("prefetch (%d) must exceed batch-size (%d), or batches never fill", c.Prefetch, c.BatchSize))
	}
	if !slices.Contains([]string{"retry", "reject", "park"}, c.NoHandler) {
		problems = append(problems, fmt.Sprintf("no-handler %q: want retry, reject or park", c.NoHandler))
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
	if c.OutboxRetryMaxDelay < time.Second {
		problems = append(problems, "outbox-retry-max-delay must be at least 1s, the first wait")
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
	return stompx.Config{Addr: c.StompAddr, Login: c.StompLogin, Passcode: c.StompPasscode, Host: c.StompHost,
		Broker: stompx.Broker(c.Broker), TLS: tls, HeartBeat: c.StompHeartBeat, Logger: log}
}
