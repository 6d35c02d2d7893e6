// Package config defines inboxd's settings: command-line flags, each with an
// INBOXD_* environment variable as its fallback.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/stompx"
)

// Config is every setting of the command line: the library's (inboxd.Config, the same
// fields a program embedding inboxd sets) and the command line's own, which a library
// caller gives another way (a pool for the URL, a logger for the format and level,
// values for the secret files).
type Config struct {
	inboxd.Config

	DatabaseURL string

	// Secrets from files (Docker/Kubernetes *_FILE convention), read once by Validate
	// into StompPasscode, DatabasePassword, AdminToken, ReadToken and WebhookToken.
	StompPasscodeFile    string
	DatabasePasswordFile string
	DatabasePassword     string // from DatabasePasswordFile; applied by PoolConfig and ConnConfig
	AdminTokenFile       string
	// ReadTokenFile holds the read token (INBOXD_READ_TOKEN_FILE, -read-token-file;
	// default empty: none).
	ReadTokenFile    string
	WebhookTokenFile string
	secretsLoaded    bool

	// StompTLSConfig is what Validate loads from the Stomp* TLS files; nil when StompTLS
	// is off.
	StompTLSConfig *stompx.TLS

	// Demo wires in the demo (package registration): the command line's business, never
	// the library's.
	Demo bool

	LogFormat string
	LogLevel  string

	envErrs []string // environment values that did not parse, reported by Validate

	// The flags whose 0 means "none" or "forever", where the library's zero means the
	// default and a negative value "none" or "forever": toLibrary translates them.
	immediateRetries               int
	retention, quarantineRetention time.Duration
}

// toLibrary sets the library's fields from the flags that mean something else by 0
// (none or forever, like -1).
func (c *Config) toLibrary() {
	c.ImmediateRetries, c.Retention, c.QuarantineRetention = c.immediateRetries, c.retention, c.quarantineRetention
	if c.ImmediateRetries == 0 {
		c.ImmediateRetries = -1
	}
	for _, d := range []*time.Duration{&c.Retention, &c.QuarantineRetention} {
		if *d == 0 {
			*d = -1
		}
	}
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
	// An empty address turns the part off.
	addr := func(p *string, off *bool) func(string) error {
		return func(v string) error { *p, *off = v, v == ""; return nil }
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
		{"database-url", "INBOXD_DATABASE_URL", "PostgreSQL or CockroachDB connection URL", defaults.DatabaseURL, str(&c.DatabaseURL)},
		{"database-password-file", "INBOXD_DATABASE_PASSWORD_FILE", "file holding the database password, used instead of one in the URL (not world-readable)", "", str(&c.DatabasePasswordFile)},
		{"stomp-addr", "INBOXD_STOMP_ADDR", "broker STOMP address host:port (ActiveMQ, or RabbitMQ's STOMP plugin)", defaults.StompAddr, str(&c.StompAddr)},
		{"broker", "INBOXD_BROKER", "broker STOMP dialect: activemq, rabbitmq, or auto (from the CONNECTED frame's server header)", defaults.Broker, str(&c.Broker)},
		{"stomp-host", "INBOXD_STOMP_HOST", "STOMP host header: RabbitMQ's virtual host (empty: / for broker rabbitmq, else the host of stomp-addr)", "", str(&c.StompHost)},
		{"stomp-login", "INBOXD_STOMP_LOGIN", "STOMP login", "", str(&c.StompLogin)},
		{"stomp-passcode", "INBOXD_STOMP_PASSCODE", "STOMP passcode (a flag is visible in ps: prefer the env or -stomp-passcode-file)", "", str(&c.StompPasscode)},
		{"stomp-heart-beat", "INBOXD_STOMP_HEART_BEAT", "STOMP heart-beat interval both ways; a silent broker is noticed within 1.5 intervals (negative: off)", short(defaults.StompHeartBeat), dur(&c.StompHeartBeat)},
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
		{"http-addr", "INBOXD_HTTP_ADDR", "REST API listen address", defaults.HTTPAddr, addr(&c.HTTPAddr, &c.DisableHTTP)},
		{"admin-token", "INBOXD_ADMIN_TOKEN", "bearer token required by /admin endpoints and accepted by /journal (empty: /admin served to localhost only)", "", str(&c.AdminToken)},
		{"admin-token-file", "INBOXD_ADMIN_TOKEN_FILE", "file holding the admin token (not world-readable)", "", str(&c.AdminTokenFile)},
		{"read-token", "INBOXD_READ_TOKEN", "bearer token required by /journal reads, which hold personal data (empty, with no admin token: served to localhost only)", "", str(&c.ReadToken)},
		{"read-token-file", "INBOXD_READ_TOKEN_FILE", "file holding the read token (not world-readable)", "", str(&c.ReadTokenFile)},
		{"webhook-addr", "INBOXD_WEBHOOK_ADDR", "changefeed webhook HTTPS listen address (empty: webhook off)", defaults.WebhookAddr, addr(&c.WebhookAddr, &c.DisableWebhook)},
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
		{"prefetch", "INBOXD_PREFETCH", "broker prefetch per subscription (ActiveMQ activemq.prefetchSize, RabbitMQ prefetch-count); must exceed batch-size", strconv.Itoa(defaults.Prefetch), num(&c.Prefetch)},
		{"ack-mode", "INBOXD_ACK_MODE", "client (one cumulative ack per batch) or client-individual", defaults.AckMode, str(&c.AckMode)},
		{"max-body-bytes", "INBOXD_MAX_BODY_BYTES", "larger message bodies are quarantined", strconv.Itoa(defaults.MaxBodyBytes), num(&c.MaxBodyBytes)},
		{"max-statement-bytes", "INBOXD_MAX_STATEMENT_BYTES", "one SQL statement carrying message bytes, parameters included, at most; keep it well under CockroachDB's sql.conn.max_read_buffer_message_size (16 MiB); max-body-bytes must fit one", strconv.Itoa(defaults.MaxStatementBytes), num(&c.MaxStatementBytes)},
		{"max-inflight-bytes", "INBOXD_MAX_INFLIGHT_BYTES", "message bytes one destination holds unacked, at most; past it the prefetch shrinks to fit the largest bodies", strconv.Itoa(defaults.MaxInflightBytes), num(&c.MaxInflightBytes)},
		{"default-event-type", "INBOXD_DEFAULT_EVENT_TYPE", "event type of messages with no event-type header and no type field (empty: they are quarantined as missing_type; with demo, registration)", "", str(&c.DefaultEventType)},
		{"id-source", "INBOXD_ID_SOURCE", "where a message's event id is read: payload:FIELD (a top-level payload field), header:NAME (a STOMP header, e.g. header:message-id, the JMS message id), or cloudevents (only CloudEvents are accepted); any string, UUID or not. CloudEvents are always keyed by source and id", defaults.IDSource, str(&c.IDSource)},
		{"migrate", "INBOXD_MIGRATE", "auto: serve applies pending migrations at start, under the migration lock (needs the schema owner's DDL rights); off: serve changes no schema and refuses one that is behind (run inboxd migrate first) or ahead by migrations that are not compatible", "off", func(v string) error {
			switch v {
			case "auto", "off":
				c.MigrateAtStart = v == "auto"
				return nil
			}
			return fmt.Errorf("want auto or off: %q", v)
		}},
		{"demo", "INBOXD_DEMO", "serve the demo (what make demo runs): the registration handler, GET /registration/form and POST /registration; with migrate, its customers table", "false", boolean(&c.Demo)},
		{"concurrency", "INBOXD_CONCURRENCY", "processing transactions (batches of different aggregates) at once; default: the number of CPUs, at least 2", strconv.Itoa(defaults.Concurrency()), num(&c.Concurrency)},
		// The recoverability policy; its defaults are the engine's (process.Default*).
		{"immediate-retries", "INBOXD_IMMEDIATE_RETRIES", "times a failing handler runs again at once, within one attempt, before the attempt is recorded as failed (-1 or 0: none)", strconv.Itoa(defaults.ImmediateRetries), num(&c.immediateRetries)},
		{"max-attempts", "INBOXD_MAX_ATTEMPTS", "recorded handler attempts before an event is DEAD", strconv.Itoa(defaults.MaxAttempts), num(&c.MaxAttempts)},
		{"retry-base-delay", "INBOXD_RETRY_BASE_DELAY", "delay after the first failed attempt; it doubles per attempt up to retry-max-delay, ±10%", short(defaults.RetryBaseDelay), dur(&c.RetryBaseDelay)},
		{"retry-max-delay", "INBOXD_RETRY_MAX_DELAY", "longest delay between two attempts", short(defaults.RetryMaxDelay), dur(&c.RetryMaxDelay)},
		{"process-batch-size", "INBOXD_PROCESS_BATCH_SIZE", "events per processing transaction, at most (on CockroachDB, lower it if batches keep conflicting; see README)", strconv.Itoa(defaults.ProcessBatchSize), num(&c.ProcessBatchSize)},
		{"handler-timeout", "INBOXD_HANDLER_TIMEOUT", "how long one handler run may take; it then fails (the attempt counts) and its transaction is rolled back; also the processing transactions' statement_timeout", short(defaults.HandlerTimeout), dur(&c.HandlerTimeout)},
		{"webhook-process-timeout", "INBOXD_WEBHOOK_PROCESS_TIMEOUT", "how long the webhook may process one changefeed batch, detached from the sink's request (which ends after webhook_client_timeout; the sink's retries join the batch); at least handler-timeout", short(defaults.WebhookProcessTimeout), dur(&c.WebhookProcessTimeout)},
		{"sweep-interval", "INBOXD_SWEEP_INTERVAL", "how often the sweeper looks for due retries and undelivered events", short(defaults.SweepInterval), dur(&c.SweepInterval)},
		{"sweep-grace", "INBOXD_SWEEP_GRACE", "how long a RECEIVED event waits for the changefeed before the sweeper processes it; 0 means none on PostgreSQL and 30s on CockroachDB", short(time.Duration(defaults.SweepGrace)), dur(&c.SweepGrace)},
		{"retention", "INBOXD_RETENTION", "how long PROCESSED and REJECTED journal entries are kept (the dedup window); -1s or 0 keeps them forever", short(defaults.Retention), dur(&c.retention)},
		{"quarantine-retention", "INBOXD_QUARANTINE_RETENTION", "how long quarantined messages are kept; -1s or 0 keeps them forever", short(defaults.QuarantineRetention), dur(&c.quarantineRetention)},
		{"outbox-poll-interval", "INBOXD_OUTBOX_POLL_INTERVAL", "how often the outbox relay looks for unsent messages when nothing woke it (PostgreSQL wakes it on commit)", short(defaults.OutboxPollInterval), dur(&c.OutboxPollInterval)},
		{"outbox-batch-size", "INBOXD_OUTBOX_BATCH_SIZE", "outbox messages claimed per relay pass, at most", strconv.Itoa(defaults.OutboxBatchSize), num(&c.OutboxBatchSize)},
		{"outbox-lease", "INBOXD_OUTBOX_LEASE", "how long a relay holds the outbox messages it claimed before another instance may take them", short(defaults.OutboxLease), dur(&c.OutboxLease)},
		{"outbox-retention", "INBOXD_OUTBOX_RETENTION", "how long sent outbox messages are kept before deletion", short(defaults.OutboxRetention), dur(&c.OutboxRetention)},
		{"shutdown-timeout", "INBOXD_SHUTDOWN_TIMEOUT", "how long a graceful shutdown may take", short(defaults.ShutdownTimeout), dur(&c.ShutdownTimeout)},
		{"stall-after", "INBOXD_STALL_AFTER", "/readyz reports ingest, processing or the feed unhealthy after this long without progress while work waits, or failing", short(defaults.StallAfter), dur(&c.StallAfter)},
		{"log-format", "INBOXD_LOG_FORMAT", "text or json", defaults.LogFormat, str(&c.LogFormat)},
		{"log-level", "INBOXD_LOG_LEVEL", "debug, info, warn or error", defaults.LogLevel, str(&c.LogLevel)},
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

// Defaults returns a Config holding every setting's built-in default, from the table of
// flags, without reading the environment (TestDefaultsAgree holds it equal to the
// library's inboxd.Config{}.WithDefaults()).
func Defaults() *Config {
	c := &Config{}
	for _, s := range settings(c) {
		if err := s.set(s.def); err != nil {
			panic("config: bad built-in default of " + s.flag + ": " + err.Error()) // a bug in the table
		}
	}
	c.toLibrary()
	return c
}

// Validate reports settings that cannot work: the command line's own, then the
// library's (inboxd.Config.Validate), in one error.
func (c *Config) Validate() error {
	var problems []string
	problems = append(problems, c.envErrs...)
	// Secrets first: checks below (and callers) see the values read from files.
	problems = append(problems, c.loadSecrets()...)
	if c.DatabaseURL == "" {
		problems = append(problems, "database-url is empty")
	}
	if len(c.Destinations) == 0 {
		problems = append(problems, "destination is empty")
	}
	// Zero means the default to the library; given as a flag it is a mistake.
	for _, v := range []struct {
		name  string
		value int64
	}{
		{"commits-in-flight", int64(c.CommitsInFlight)}, {"stall-after", int64(c.StallAfter)},
		{"shutdown-timeout", int64(c.ShutdownTimeout)}, {"concurrency", int64(c.Concurrency)},
		{"max-attempts", int64(c.MaxAttempts)}, {"outbox-poll-interval", int64(c.OutboxPollInterval)},
		{"outbox-batch-size", int64(c.OutboxBatchSize)}, {"outbox-retention", int64(c.OutboxRetention)},
		{"process-batch-size", int64(c.ProcessBatchSize)},
	} {
		if v.value <= 0 {
			problems = append(problems, v.name+" must be positive")
		}
	}
	// -1 (any negative value) means none or forever, as in the library; 0 says the same
	// here, as it always has on the command line.
	// The library takes an empty name for its default; given as a flag, it is a mistake.
	for _, d := range c.Destinations {
		if strings.HasPrefix(d, "/topic/") && !c.NonDurableTopics && (c.ClientID == "" || c.SubscriptionName == "") {
			problems = append(problems, fmt.Sprintf("destination %s is a topic and client-id or subscription-name is empty: "+
				"inboxd would subscribe non-durably and silently lose every event published while it is stopped or "+
				"reconnecting; set both (durable subscription), consume the virtual topic's queue "+
				"/queue/Consumer.<app>.VirtualTopic.<name>, or accept the loss with -non-durable-topics", d))
		}
	}
	c.toLibrary()
	if c.LogFormat != "text" && c.LogFormat != "json" {
		problems = append(problems, fmt.Sprintf("log-format %q: want text or json", c.LogFormat))
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		problems = append(problems, err.Error())
	}
	if err := c.Config.Validate(); err != nil {
		var ce *inboxd.ConfigError
		if !errors.As(err, &ce) {
			return err
		}
		problems = append(problems, ce.Problems...)
	}
	if len(problems) == 0 && c.StompTLS && c.StompTLSConfig == nil {
		t, err := stompx.LoadTLS(c.stompTLSFiles())
		if err != nil {
			problems = append(problems, err.Error())
		}
		c.StompTLSConfig = t
	}
	if len(problems) > 0 {
		return &inboxd.ConfigError{Problems: problems}
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

// WebhookAuthToken is the token the webhook demands and the changefeed sends
// (certs.WebhookToken).
func (c *Config) WebhookAuthToken() (token string, created bool, err error) {
	return certs.WebhookToken(c.WebhookToken, c.CertDir)
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
