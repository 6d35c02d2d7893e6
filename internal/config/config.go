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

	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
)

// Config is every setting of inboxd.
type Config struct {
	DatabaseURL string

	StompAddr     string
	StompLogin    string
	StompPasscode string
	Destinations  []string
	// PublishDestination is where the API publishes (the demo's POST /registration);
	// empty means Destinations[0].
	PublishDestination string
	ClientID           string
	SubscriptionName   string
	NonDurableTopics   bool

	// Broker TLS (see stompx.TLSFiles); loaded by Validate into StompTLSConfig.
	StompTLS             bool
	StompCAFile          string
	StompServerName      string
	StompCertFile        string
	StompKeyFile         string
	StompTLSInsecureSkip bool
	StompTLSConfig       *stompx.TLS // nil when StompTLS is off

	// Secrets from files (Docker/Kubernetes *_FILE convention), read once by Validate
	// into StompPasscode, DatabasePassword, AdminToken and WebhookToken.
	StompPasscodeFile    string
	DatabasePasswordFile string
	DatabasePassword     string // from DatabasePasswordFile; applied by PoolConfig and ConnConfig
	AdminTokenFile       string
	WebhookTokenFile     string
	secretsLoaded        bool

	HTTPAddr   string
	AdminToken string
	ReadToken  string

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
	MaxInflightBytes int
	DefaultEventType string
	// IDSource says where a message's event id is read from (message.ParseIDSource):
	// payload:FIELD or header:NAME. CloudEvents are keyed by source and id whatever it says.
	IDSource string
	// MaxStatementBytes bounds one SQL statement carrying message bytes, parameters
	// included: CockroachDB refuses a client message over 16 MiB (package sqlbound).
	MaxStatementBytes int

	// Demo wires in the demo (package registration): the command line's business, never
	// the library's.
	Demo bool

	Concurrency      int
	ImmediateRetries int
	MaxAttempts      int
	RetryBaseDelay   time.Duration
	RetryMaxDelay    time.Duration
	ProcessBatchSize int
	HandlerTimeout   time.Duration
	// WebhookProcessTimeout bounds the processing of one changefeed batch, which runs
	// detached from the sink's request (webhook.Config.ProcessTimeout).
	WebhookProcessTimeout time.Duration
	SweepInterval         time.Duration
	SweepGrace            time.Duration

	Retention           time.Duration // PROCESSED and REJECTED journal entries; 0 keeps them forever
	QuarantineRetention time.Duration // quarantine rows; 0 keeps them forever
	OutboxPollInterval  time.Duration
	OutboxBatchSize     int
	OutboxLease         time.Duration
	OutboxRetention     time.Duration

	ShutdownTimeout time.Duration
	StallAfter      time.Duration
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

// boolFlags are the settings where "-flag" alone means true.
var boolFlags = map[string]bool{"demo": true, "stomp-tls": true, "stomp-tls-insecure-skip-verify": true, "non-durable-topics": true}

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
	boolean := func(p *bool) func(string) error {
		return func(v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("not a boolean (true or false): %q", v)
			}
			*p = b
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
		{"database-password-file", "INBOXD_DATABASE_PASSWORD_FILE", "file holding the database password, used instead of one in the URL (not world-readable)", "", str(&c.DatabasePasswordFile)},
		{"stomp-addr", "INBOXD_STOMP_ADDR", "ActiveMQ STOMP address host:port", defaults.StompAddr, str(&c.StompAddr)},
		{"stomp-login", "INBOXD_STOMP_LOGIN", "STOMP login", "", str(&c.StompLogin)},
		{"stomp-passcode", "INBOXD_STOMP_PASSCODE", "STOMP passcode (a flag is visible in ps: prefer the env or -stomp-passcode-file)", "", str(&c.StompPasscode)},
		{"stomp-passcode-file", "INBOXD_STOMP_PASSCODE_FILE", "file holding the STOMP passcode (not world-readable; trailing newline trimmed)", "", str(&c.StompPasscodeFile)},
		{"stomp-tls", "INBOXD_STOMP_TLS", "speak TLS to the broker (ActiveMQ stomp+ssl); never falls back to plaintext", "false", boolean(&c.StompTLS)},
		{"stomp-ca-file", "INBOXD_STOMP_CA_FILE", "PEM CA bundle that signs the broker's certificate (empty: the system pool)", "", str(&c.StompCAFile)},
		{"stomp-server-name", "INBOXD_STOMP_SERVER_NAME", "name the broker's certificate must carry (empty: the host of stomp-addr)", "", str(&c.StompServerName)},
		{"stomp-cert-file", "INBOXD_STOMP_CERT_FILE", "client certificate (PEM) for mutual TLS", "", str(&c.StompCertFile)},
		{"stomp-key-file", "INBOXD_STOMP_KEY_FILE", "client key (PEM) for mutual TLS; not world-readable", "", str(&c.StompKeyFile)},
		{"stomp-tls-insecure-skip-verify", "INBOXD_STOMP_TLS_INSECURE_SKIP_VERIFY", "INSECURE: accept any broker certificate (anyone on the path can read and change messages)", "false", boolean(&c.StompTLSInsecureSkip)},
		{"destination", "INBOXD_DESTINATION", "STOMP destination(s) to consume, comma-separated; /topic/ ones get a durable subscription. The first is where POST /registration publishes unless publish-destination is set", defaults.Destination, list(&c.Destinations)},
		{"publish-destination", "INBOXD_PUBLISH_DESTINATION", "where POST /registration publishes, e.g. /topic/VirtualTopic.registrations (empty: the first destination)", "", str(&c.PublishDestination)},
		{"client-id", "INBOXD_CLIENT_ID", "durable topic subscriptions: client id; the connection of /topic/T connects as <client-id>.T. Keep it stable, one per application", defaults.ClientID, str(&c.ClientID)},
		{"subscription-name", "INBOXD_SUBSCRIPTION_NAME", "durable topic subscriptions: activemq.subscriptionName. Keep it stable", defaults.SubscriptionName, str(&c.SubscriptionName)},
		{"non-durable-topics", "INBOXD_NON_DURABLE_TOPICS", "subscribe /topic/ destinations non-durably, losing every event published while inboxd is disconnected", "false", boolean(&c.NonDurableTopics)},
		{"http-addr", "INBOXD_HTTP_ADDR", "REST API listen address", defaults.HTTPAddr, str(&c.HTTPAddr)},
		{"admin-token", "INBOXD_ADMIN_TOKEN", "bearer token required by /admin endpoints and accepted by /journal (empty: /admin served to localhost only)", "", str(&c.AdminToken)},
		{"admin-token-file", "INBOXD_ADMIN_TOKEN_FILE", "file holding the admin token (not world-readable)", "", str(&c.AdminTokenFile)},
		{"read-token", "INBOXD_READ_TOKEN", "bearer token required by /journal reads, which hold personal data (empty, with no admin token: served to localhost only)", "", str(&c.ReadToken)},
		{"webhook-addr", "INBOXD_WEBHOOK_ADDR", "changefeed webhook HTTPS listen address (empty: webhook off)", defaults.WebhookAddr, str(&c.WebhookAddr)},
		{"webhook-token", "INBOXD_WEBHOOK_TOKEN", "bearer token the changefeed must send (webhook_auth_header); empty: generated once into cert-dir/webhook-token (0600), which changefeed create uses", "", str(&c.WebhookToken)},
		{"webhook-token-file", "INBOXD_WEBHOOK_TOKEN_FILE", "file holding the webhook token (not world-readable)", "", str(&c.WebhookTokenFile)},
		{"webhook-url", "INBOXD_WEBHOOK_URL", "sink URL the changefeed posts to", defaults.WebhookURL, str(&c.WebhookURL)},
		{"cert-dir", "INBOXD_CERT_DIR", "directory for the generated webhook CA and certificate", defaults.CertDir, str(&c.CertDir)},
		{"cert-file", "INBOXD_CERT_FILE", "webhook TLS certificate file (PEM); generated when empty", "", str(&c.CertFile)},
		{"key-file", "INBOXD_KEY_FILE", "webhook TLS key file (PEM)", "", str(&c.KeyFile)},
		{"cert-hosts", "INBOXD_CERT_HOSTS", "host names and IPs of the generated certificate, comma-separated", defaults.CertHosts, list(&c.CertHosts)},
		{"batch-size", "INBOXD_BATCH_SIZE", "messages per ingest transaction, at most", strconv.Itoa(defaults.BatchSize), num(&c.BatchSize)},
		{"batch-linger", "INBOXD_BATCH_LINGER", "how long a partial ingest batch waits for more messages", short(defaults.BatchLinger), dur(&c.BatchLinger)},
		{"commits-in-flight", "INBOXD_COMMITS_IN_FLIGHT", "ingest batches of one destination written at once (acks stay in order)", strconv.Itoa(defaults.CommitsInFlight), num(&c.CommitsInFlight)},
		{"prefetch", "INBOXD_PREFETCH", "broker prefetch per subscription (activemq.prefetchSize); must exceed batch-size", strconv.Itoa(defaults.Prefetch), num(&c.Prefetch)},
		{"ack-mode", "INBOXD_ACK_MODE", "client (one cumulative ack per batch) or client-individual", defaults.AckMode, str(&c.AckMode)},
		{"max-body-bytes", "INBOXD_MAX_BODY_BYTES", "larger message bodies are quarantined", strconv.Itoa(defaults.MaxBodyBytes), num(&c.MaxBodyBytes)},
		{"max-statement-bytes", "INBOXD_MAX_STATEMENT_BYTES", "one SQL statement carrying message bytes, parameters included, at most; keep it well under CockroachDB's sql.conn.max_read_buffer_message_size (16 MiB); max-body-bytes must fit one", strconv.Itoa(defaults.MaxStatementBytes), num(&c.MaxStatementBytes)},
		{"max-inflight-bytes", "INBOXD_MAX_INFLIGHT_BYTES", "message bytes one destination holds unacked, at most; past it the prefetch shrinks to fit the largest bodies", strconv.Itoa(defaults.MaxInflightBytes), num(&c.MaxInflightBytes)},
		{"default-event-type", "INBOXD_DEFAULT_EVENT_TYPE", "event type of messages with no event-type header and no type field (empty: they are quarantined as missing_type; with demo, registration)", "", str(&c.DefaultEventType)},
		{"id-source", "INBOXD_ID_SOURCE", "where a message's event id is read: payload:FIELD (a top-level payload field), header:NAME (a STOMP header, e.g. header:message-id, the JMS message id), or cloudevents (only CloudEvents are accepted); any string, UUID or not. CloudEvents are always keyed by source and id", defaults.IDSource, str(&c.IDSource)},
		{"demo", "INBOXD_DEMO", "serve the demo (what make demo runs): the registration handler and its customers table, GET /registration/form and POST /registration", "false", boolean(&c.Demo)},
		{"concurrency", "INBOXD_CONCURRENCY", "processing transactions (batches of different aggregates) at once; default: the number of CPUs, at least 2", strconv.Itoa(defaults.Concurrency()), num(&c.Concurrency)},
		// The recoverability policy; its defaults are the engine's (process.Default*).
		{"immediate-retries", "INBOXD_IMMEDIATE_RETRIES", "times a failing handler runs again at once, within one attempt, before the attempt is recorded as failed (0: none)", strconv.Itoa(defaults.ImmediateRetries), num(&c.ImmediateRetries)},
		{"max-attempts", "INBOXD_MAX_ATTEMPTS", "recorded handler attempts before an event is DEAD", strconv.Itoa(defaults.MaxAttempts), num(&c.MaxAttempts)},
		{"retry-base-delay", "INBOXD_RETRY_BASE_DELAY", "delay after the first failed attempt; it doubles per attempt up to retry-max-delay, ±10%", short(defaults.RetryBaseDelay), dur(&c.RetryBaseDelay)},
		{"retry-max-delay", "INBOXD_RETRY_MAX_DELAY", "longest delay between two attempts", short(defaults.RetryMaxDelay), dur(&c.RetryMaxDelay)},
		{"process-batch-size", "INBOXD_PROCESS_BATCH_SIZE", "events per processing transaction, at most (on CockroachDB, lower it if batches keep conflicting; see README)", strconv.Itoa(defaults.ProcessBatchSize), num(&c.ProcessBatchSize)},
		{"handler-timeout", "INBOXD_HANDLER_TIMEOUT", "how long one handler run may take; it then fails (the attempt counts) and its transaction is rolled back; also the processing transactions' statement_timeout", short(defaults.HandlerTimeout), dur(&c.HandlerTimeout)},
		{"webhook-process-timeout", "INBOXD_WEBHOOK_PROCESS_TIMEOUT", "how long the webhook may process one changefeed batch, detached from the sink's request (which ends after webhook_client_timeout; the sink's retries join the batch); at least handler-timeout", short(defaults.WebhookProcessTimeout), dur(&c.WebhookProcessTimeout)},
		{"sweep-interval", "INBOXD_SWEEP_INTERVAL", "how often the sweeper looks for due retries and undelivered events", short(defaults.SweepInterval), dur(&c.SweepInterval)},
		{"sweep-grace", "INBOXD_SWEEP_GRACE", "how long a RECEIVED event waits for the changefeed before the sweeper processes it; 0 means none on PostgreSQL and 30s on CockroachDB", short(time.Duration(defaults.SweepGrace)), dur(&c.SweepGrace)},
		{"retention", "INBOXD_RETENTION", "how long PROCESSED and REJECTED journal entries are kept (the dedup window); 0 keeps them forever", short(defaults.Retention), dur(&c.Retention)},
		{"quarantine-retention", "INBOXD_QUARANTINE_RETENTION", "how long quarantined messages are kept; 0 keeps them forever", short(defaults.QuarantineRetention), dur(&c.QuarantineRetention)},
		{"outbox-poll-interval", "INBOXD_OUTBOX_POLL_INTERVAL", "how often the outbox relay looks for unsent messages when nothing woke it (PostgreSQL wakes it on commit)", short(defaults.OutboxPollInterval), dur(&c.OutboxPollInterval)},
		{"outbox-batch-size", "INBOXD_OUTBOX_BATCH_SIZE", "outbox messages claimed per relay pass, at most", strconv.Itoa(defaults.OutboxBatchSize), num(&c.OutboxBatchSize)},
		{"outbox-lease", "INBOXD_OUTBOX_LEASE", "how long a relay holds the outbox messages it claimed before another instance may take them", short(defaults.OutboxLease), dur(&c.OutboxLease)},
		{"outbox-retention", "INBOXD_OUTBOX_RETENTION", "how long sent outbox messages are kept before deletion", short(defaults.OutboxRetention), dur(&c.OutboxRetention)},
		{"shutdown-timeout", "INBOXD_SHUTDOWN_TIMEOUT", "how long a graceful shutdown may take", short(defaults.ShutdownTimeout), dur(&c.ShutdownTimeout)},
		{"stall-after", "INBOXD_STALL_AFTER", "/readyz reports ingest, processing or the feed unhealthy after this long without progress while work waits, or failing", short(defaults.StallAfter), dur(&c.StallAfter)},
		{"log-format", "INBOXD_LOG_FORMAT", "text or json", "text", str(&c.LogFormat)},
		{"log-level", "INBOXD_LOG_LEVEL", "debug, info, warn or error", "info", str(&c.LogLevel)},
	}
}

// short writes a default duration as an operator would: "168h", not "168h0m0s".
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s") // "5m0s" → "5m"
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m") // "168h0m" → "168h"
	}
	return s
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
		usage := fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def)
		if boolFlags[s.flag] {
			fs.BoolFunc(s.flag, usage, s.set)
		} else {
			fs.Func(s.flag, usage, s.set)
		}
	}
	return c
}

// Defaults returns a Config holding every setting's built-in default, from the same
// table as the flags, without reading the environment: the library (package inboxd)
// fills the fields its caller leaves zero from it.
func Defaults() *Config {
	c := &Config{}
	for _, s := range settings(c) {
		if err := s.set(s.def); err != nil {
			panic("config: bad built-in default of " + s.flag + ": " + err.Error()) // a bug in the table
		}
	}
	return c
}

// MaxBatchSize is journal.SequenceBlock: one ingest batch numbers its rows inside one
// block of the journal sequence (TestMaxBatchSizeIsSequenceBlock keeps them equal).
const MaxBatchSize = 65536

// Validate reports settings that cannot work.
func (c *Config) Validate() error {
	var problems []string
	problems = append(problems, c.envErrs...)
	// Secrets first: checks below (and callers) see the values read from files.
	problems = append(problems, c.loadSecrets()...)
	problems = append(problems, c.loadStompTLS()...)
	if c.DatabaseURL == "" {
		problems = append(problems, "database-url is empty")
	}
	if len(c.Destinations) == 0 {
		problems = append(problems, "destination is empty")
	}
	for _, d := range c.Destinations {
		if strings.HasPrefix(d, "/topic/") && !c.NonDurableTopics && (c.ClientID == "" || c.SubscriptionName == "") {
			problems = append(problems, fmt.Sprintf("destination %s is a topic and client-id or subscription-name is empty: "+
				"inboxd would subscribe non-durably and silently lose every event published while it is stopped or "+
				"reconnecting; set both (durable subscription), consume the virtual topic's queue "+
				"/queue/Consumer.<app>.VirtualTopic.<name>, or accept the loss with -non-durable-topics", d))
		}
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
	if c.CommitsInFlight < 1 {
		problems = append(problems, "commits-in-flight must be at least 1")
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
	if c.StallAfter <= 0 {
		problems = append(problems, "stall-after must be positive")
	}
	if c.ShutdownTimeout <= 0 {
		problems = append(problems, "shutdown-timeout must be positive")
	}
	if c.Concurrency < 1 {
		problems = append(problems, "concurrency must be at least 1")
	}
	if c.MaxAttempts < 1 {
		problems = append(problems, "max-attempts must be at least 1")
	}
	if c.ImmediateRetries < 0 {
		problems = append(problems, "immediate-retries must be at least 0")
	}
	if c.RetryBaseDelay < time.Millisecond {
		problems = append(problems, "retry-base-delay must be at least 1ms")
	}
	if c.RetryMaxDelay < c.RetryBaseDelay {
		problems = append(problems, fmt.Sprintf("retry-max-delay (%s) must be at least retry-base-delay (%s)", c.RetryMaxDelay, c.RetryBaseDelay))
	}
	for name, d := range map[string]time.Duration{"retention": c.Retention, "quarantine-retention": c.QuarantineRetention} {
		// Row-level TTL on CockroachDB takes whole seconds.
		if d != 0 && (d < time.Second || d%time.Second != 0) {
			problems = append(problems, fmt.Sprintf("%s %s: want 0 or a whole number of seconds, at least 1s", name, d))
		}
	}
	if c.OutboxPollInterval <= 0 {
		problems = append(problems, "outbox-poll-interval must be positive")
	}
	if c.OutboxBatchSize < 1 {
		problems = append(problems, "outbox-batch-size must be at least 1")
	}
	if c.OutboxLease < time.Second {
		problems = append(problems, "outbox-lease must be at least 1s")
	}
	if c.OutboxRetention <= 0 {
		problems = append(problems, "outbox-retention must be positive")
	}
	if c.ProcessBatchSize < 1 {
		problems = append(problems, "process-batch-size must be at least 1")
	}
	if c.HandlerTimeout < time.Millisecond {
		problems = append(problems, "handler-timeout must be at least 1ms")
	}
	if c.WebhookProcessTimeout < c.HandlerTimeout {
		problems = append(problems, fmt.Sprintf("webhook-process-timeout (%s) must be at least handler-timeout (%s): a batch must outlast one handler that runs to its timeout, or it is cancelled at every delivery",
			c.WebhookProcessTimeout, c.HandlerTimeout))
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

// Publish is where POST /registration publishes.
func (c *Config) Publish() string {
	if c.PublishDestination != "" {
		return c.PublishDestination
	}
	return c.Destinations[0]
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// WebhookAuthToken is the token the webhook demands and the changefeed sends:
// INBOXD_WEBHOOK_TOKEN, else the secret kept in the certificate directory, generated on
// first use (created reports that). The webhook is never open.
func (c *Config) WebhookAuthToken() (token string, created bool, err error) {
	if c.WebhookToken != "" {
		return c.WebhookToken, false, nil
	}
	token, created, err = certs.Secret(c.CertDir, certs.WebhookTokenFile)
	if err != nil {
		return "", false, fmt.Errorf("INBOXD_WEBHOOK_TOKEN is empty and the generated token in INBOXD_CERT_DIR is unusable (set the variable, or fix the file): %w", err)
	}
	return token, created, nil
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
