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

// setting is one row of the one table of settings: its flag, and from it the
// environment variable (INBOXD_ and the flag's name in capitals), the default the flag
// shows (from value, a constant of package defaults) and the README's configuration
// table (TestREADMEConfigTable writes it from these rows).
type setting struct {
	row
	env, def string // derived by settings: INBOXD_FLAG_NAME, and value as the flag shows it
}

// row is what a setting's line in the table gives.
type row struct {
	flag string
	// value is the built-in default: a string, int, bool or time.Duration ("" or false:
	// none).
	value any
	usage string // the flag's help
	// readme is the meaning cell of the setting's README row, optionally preceded by a
	// default cell of its own and " | " when the default is not a literal (CPUs, or a
	// default that depends on another setting); sharesRowAbove lists the variable in the
	// row above instead.
	readme string
	set    func(string) error
}

// sharesRowAbove documents a setting in the README row above it (e.g. a login beside its
// passcode).
const sharesRowAbove = "\x00above"

// boolFlags are the settings where "-flag" alone means true.
var boolFlags = map[string]bool{"demo": true, "stomp-tls": true, "stomp-tls-insecure-skip-verify": true, "non-durable-topics": true}

// settings is every setting, each filling its field of c, with what its row implies.
func settings(c *Config) []setting {
	var out []setting
	for _, r := range table(c) {
		env := "INBOXD_" + strings.ToUpper(strings.ReplaceAll(r.flag, "-", "_"))
		out = append(out, setting{row: r, env: env, def: defaultText(r.value)})
	}
	return out
}

// defaultText writes a built-in default as the flag takes it, a duration as an operator
// would ("168h", not "168h0m0s").
func defaultText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case int:
		return strconv.Itoa(v)
	case bool:
		return strconv.FormatBool(v)
	case time.Duration:
		return short(v)
	}
	panic(fmt.Sprintf("config: a default of type %T", v)) // a bug in the table
}

// table is the one table of settings, a row each, in the order of the README's
// configuration table. A new setting is a row here, its default in package defaults and
// its inboxd.Config field (TestConfigDocs, TestDefaultsAgree and TestREADMEConfigTable
// hold the three together).
func table(c *Config) []row {
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
	return []row{
		{"database-url", defaults.DatabaseURL, "PostgreSQL or CockroachDB connection URL",
			"PostgreSQL or CockroachDB",
			str(&c.DatabaseURL)},
		{"database-password-file", "", "file holding the database password, used instead of one in the URL (not world-readable)",
			"file holding the database password, applied to the connection config (see [Secrets](#secrets))",
			str(&c.DatabasePasswordFile)},
		{"stomp-addr", defaults.StompAddr, "broker STOMP address host:port (ActiveMQ, or RabbitMQ's STOMP plugin)",
			"the broker's STOMP listener: ActiveMQ, or RabbitMQ's STOMP plugin (see [RabbitMQ](#rabbitmq))",
			str(&c.StompAddr)},
		{"broker", defaults.Broker, "broker STOMP dialect: activemq, rabbitmq, or auto (from the CONNECTED frame's server header)",
			"the broker's STOMP dialect: `activemq`, `rabbitmq`, or `auto` (from the `server` header of the `CONNECTED` frame)",
			str(&c.Broker)},
		{"stomp-host", "", "STOMP host header: RabbitMQ's virtual host (empty: / for broker rabbitmq, else the host of stomp-addr)",
			"the `host` header of `CONNECT`: RabbitMQ's virtual host. Empty: `/` with `INBOXD_BROKER=rabbitmq`, else the host of `INBOXD_STOMP_ADDR` (which ActiveMQ ignores)",
			str(&c.StompHost)},
		{"stomp-login", "", "STOMP login",
			"STOMP credentials",
			str(&c.StompLogin)},
		{"stomp-passcode", "", "STOMP passcode (a flag is visible in ps: prefer the env or -stomp-passcode-file)",
			sharesRowAbove,
			str(&c.StompPasscode)},
		{"stomp-passcode-file", "", "file holding the STOMP passcode (not world-readable; trailing newline trimmed)",
			"file holding the STOMP passcode (see [Secrets](#secrets))",
			str(&c.StompPasscodeFile)},
		{"stomp-heart-beat", defaults.StompHeartBeat, "STOMP heart-beat interval both ways; a silent broker is noticed within 1.5 intervals (negative: off)",
			"STOMP heart-beat interval, both ways; inboxd asks the broker for a beat every half interval and drops a connection silent for 1.5 intervals, so a blackholed broker is noticed within two (negative: off)",
			dur(&c.StompHeartBeat)},
		{"stomp-tls", false, "speak TLS to the broker (ActiveMQ stomp+ssl); never falls back to plaintext",
			"TLS to the broker's `stomp+ssl` connector; never falls back to plaintext (see [Broker over TLS](#broker-over-tls))",
			boolean(&c.StompTLS)},
		{"stomp-ca-file", "", "PEM CA bundle that signs the broker's certificate (empty: the system pool)",
			"PEM CA bundle that signs the broker's certificate; empty: the system pool",
			str(&c.StompCAFile)},
		{"stomp-server-name", "", "name the broker's certificate must carry (empty: the host of stomp-addr)",
			"name the broker's certificate must carry; empty: the host of `INBOXD_STOMP_ADDR`",
			str(&c.StompServerName)},
		{"stomp-cert-file", "", "client certificate (PEM) for mutual TLS",
			"client certificate and key (PEM) for mutual TLS; the key file must not be world-readable",
			str(&c.StompCertFile)},
		{"stomp-key-file", "", "client key (PEM) for mutual TLS; not world-readable",
			sharesRowAbove,
			str(&c.StompKeyFile)},
		{"stomp-tls-insecure-skip-verify", false, "INSECURE: accept any broker certificate (anyone on the path can read and change messages)",
			"**insecure**: accept any broker certificate (logged as a warning at start)",
			boolean(&c.StompTLSInsecureSkip)},
		{"destination", defaults.Destination, "STOMP destination(s) to consume, comma-separated; /topic/ ones get a durable subscription. The first is where POST /registration publishes unless publish-destination is set",
			"comma-separated destinations to consume. `/topic/…` ones get a durable subscription",
			list(&c.Destinations)},
		{"publish-destination", "", "where POST /registration publishes, e.g. /topic/VirtualTopic.registrations (empty: the first destination)",
			"empty: the first destination | where the demo's `POST /registration` publishes, e.g. `/topic/VirtualTopic.registrations`",
			str(&c.PublishDestination)},
		{"client-id", defaults.ClientID, "durable topic subscriptions: client id; the connection of /topic/T connects as <client-id>.T. Keep it stable, one per application",
			"durable subscriptions: the connection for `/topic/T` connects with client id `<client-id>.T`. Keep it stable, and use one per application",
			str(&c.ClientID)},
		{"subscription-name", defaults.SubscriptionName, "durable topic subscriptions: activemq.subscriptionName. Keep it stable",
			"durable subscriptions: `activemq.subscriptionName`. Keep it stable",
			str(&c.SubscriptionName)},
		{"non-durable-topics", false, "subscribe /topic/ destinations non-durably, losing every event published while inboxd is disconnected",
			"`true` subscribes topics non-durably, which loses every event published while inboxd is disconnected. Without it, a topic with an empty client id or subscription name is refused at start",
			boolean(&c.NonDurableTopics)},
		{"http-addr", defaults.HTTPAddr, "REST API listen address",
			"REST API (the library's `Config.HTTPAddr` defaults to loopback, `127.0.0.1:8090`)",
			addr(&c.HTTPAddr, &c.DisableHTTP)},
		{"admin-token", "", "bearer token required by /admin endpoints and accepted by /journal (empty: /admin served to localhost only)",
			"bearer token for `/admin/*`, also accepted by `/journal/*`; empty: `/admin/*` is served to localhost only, or to nobody when `INBOXD_READ_TOKEN` is set (see [SECURITY.md](SECURITY.md))",
			str(&c.AdminToken)},
		{"admin-token-file", "", "file holding the admin token (not world-readable)",
			"file holding the admin token",
			str(&c.AdminTokenFile)},
		{"read-token", "", "bearer token required by /journal reads, which hold personal data (empty, with no admin token: served to localhost only)",
			"bearer token for the journal reads (`/journal/*`, personal data); empty, with no admin token: served to localhost only. It never opens `/admin/*`",
			str(&c.ReadToken)},
		{"read-token-file", "", "file holding the read token (not world-readable)",
			"file holding the read token",
			str(&c.ReadTokenFile)},
		{"webhook-addr", defaults.WebhookAddr, "changefeed webhook HTTPS listen address (empty: webhook off)",
			"changefeed webhook, HTTPS (empty: off). The library serves it only on CockroachDB unless `Config.WebhookAddr` is set",
			addr(&c.WebhookAddr, &c.DisableWebhook)},
		{"webhook-url", defaults.WebhookURL, "sink URL the changefeed posts to",
			"the sink URL the changefeed posts to: `webhook-https://host[:port][/path]`, without credentials or query (checked at start unless the webhook is off)",
			str(&c.WebhookURL)},
		{"webhook-token", "", "bearer token the changefeed must send (webhook_auth_header); empty: generated once into cert-dir/webhook-token (0600), which changefeed create uses",
			"the changefeed must send `Authorization: Bearer <token>`; empty: generated once into `INBOXD_CERT_DIR/webhook-token` (0600), which `inboxd changefeed create` sends. The webhook is never open",
			str(&c.WebhookToken)},
		{"webhook-token-file", "", "file holding the webhook token (not world-readable)",
			"file holding the webhook token",
			str(&c.WebhookTokenFile)},
		{"cert-dir", defaults.CertDir, "directory for the generated webhook CA and certificate",
			"generated CA, server certificate and webhook token; `ca.b64` there is the value for `ca_cert=`. Narrowed to 0700 if more open; a key or token file others can read is refused",
			str(&c.CertDir)},
		{"cert-file", "", "webhook TLS certificate file (PEM); generated when empty",
			"your own webhook certificate instead; the key file must not be world-readable",
			str(&c.CertFile)},
		{"key-file", "", "webhook TLS key file (PEM)",
			sharesRowAbove,
			str(&c.KeyFile)},
		{"cert-hosts", defaults.CertHosts, "host names and IPs of the generated certificate, comma-separated",
			"names of the generated certificate",
			list(&c.CertHosts)},
		{"batch-size", defaults.BatchSize, "messages per ingest transaction, at most",
			"messages per ingest statement, at most",
			num(&c.BatchSize)},
		{"batch-linger", defaults.BatchLinger, "how long a partial ingest batch waits for more messages",
			"how long a partial batch waits",
			dur(&c.BatchLinger)},
		{"commits-in-flight", defaults.CommitsInFlight, "ingest batches of one destination written at once (acks stay in order)",
			"batches of one destination written at once; acks stay in dispatch order",
			num(&c.CommitsInFlight)},
		{"prefetch", defaults.Prefetch, "broker prefetch per subscription (ActiveMQ activemq.prefetchSize, RabbitMQ prefetch-count); must exceed batch-size",
			"unacked messages per subscription: ActiveMQ's `activemq.prefetchSize`, RabbitMQ's `prefetch-count`; must exceed the batch size",
			num(&c.Prefetch)},
		{"ack-mode", defaults.AckMode, "client (one cumulative ack per batch) or client-individual",
			"`client` (one cumulative ack per batch) or `client-individual`",
			str(&c.AckMode)},
		{"max-body-bytes", defaults.MaxBodyBytes, "larger message bodies are quarantined",
			"larger bodies are quarantined as `too_large`",
			num(&c.MaxBodyBytes)},
		{"max-statement-bytes", defaults.MaxStatementBytes, "one SQL statement carrying message bytes, parameters included, at most; keep it well under CockroachDB's sql.conn.max_read_buffer_message_size (16 MiB); max-body-bytes must fit one",
			"one SQL statement carrying message bytes, parameters included, at most. CockroachDB refuses any client message over `sql.conn.max_read_buffer_message_size` (16 MiB by default, SQLSTATE 08P01), so an ingest batch is closed before it outgrows one statement and written as several if it must; `INBOXD_MAX_BODY_BYTES` must fit one (checked at start). A message too large for one statement is quarantined `too_large` with its first bytes and a SHA-256 of the whole body, and cannot be re-injected",
			num(&c.MaxStatementBytes)},
		{"max-inflight-bytes", defaults.MaxInflightBytes, "message bytes one destination holds unacked, at most; past it the prefetch shrinks to fit the largest bodies",
			"message bytes one destination holds unacked, at most: past it, ingest commits what it took and subscribes again with a prefetch that fits the largest bodies (for a minute)",
			num(&c.MaxInflightBytes)},
		{"id-source", defaults.IDSource, "where a message's event id is read: payload:FIELD (a top-level payload field), header:NAME (a STOMP header, e.g. header:message-id, the JMS message id), or cloudevents (only CloudEvents are accepted); any string, UUID or not. CloudEvents are always keyed by source and id",
			"where the event id is read: `payload:FIELD`, `header:NAME` (e.g. `header:message-id`), or `cloudevents` (only CloudEvents accepted); any non-empty string up to 1 KiB, UUID or not. CloudEvents are always keyed by `source` + `id`",
			str(&c.IDSource)},
		{"default-event-type", "", "event type of messages with no event-type header and no type field (empty: they are quarantined as missing_type; with demo, registration)",
			"empty (`registration` with `INBOXD_DEMO`) | type of events that name none (`event-type` header, else payload `type`); empty: such messages are quarantined as `missing_type`",
			str(&c.DefaultEventType)},
		{"migrate", "off", "auto: serve applies pending migrations at start, under the migration lock (needs the schema owner's DDL rights); off: serve changes no schema and refuses one that is behind (run inboxd migrate first) or ahead by migrations that are not compatible",
			"`auto`: `serve` applies pending migrations at start (and with `INBOXD_DEMO` the `customers` table), under the migration lock, and on CockroachDB sets the row-level TTL of the retention configured, as `inboxd migrate` does; it then needs the schema owner's rights. `off`: it changes no schema (see [Deploying](#deploying))",
			func(v string) error {
				switch v {
				case "auto", "off":
					c.MigrateAtStart = v == "auto"
					return nil
				}
				return fmt.Errorf("want auto or off: %q", v)
			}},
		{"demo", false, "serve the demo (what make demo runs): the registration handler, GET /registration/form and POST /registration; with migrate, its customers table",
			"serve the demo, as `make demo` and docker compose do: the registration handler (unless the program registered its own), `GET /registration/form` and `POST /registration`; its `customers` table is created by `inboxd migrate` with `INBOXD_DEMO` (or `serve` with `INBOXD_MIGRATE=auto`). Off, inboxd knows no business event and opens no door that publishes into your queues",
			boolean(&c.Demo)},
		{"concurrency", defaults.Concurrency(), "processing transactions (batches of different aggregates) at once; default: the number of CPUs, at least 2",
			"CPUs, at least 2 | processing transactions at once, each a batch of up to `INBOXD_PROCESS_BATCH_SIZE` events of different aggregates. More workers than the database has cores only contend: on 2 cores, `inboxd bench -n 20000 -reps 2 -rows ingest,e2e-max -concurrency 8` gave 0.41–0.44× the ingest rate end to end (load 0.25 → 1.27), against 0.55× with 2 workers in the run of [Performance](#performance)",
			num(&c.Concurrency)},
		// The recoverability policy; its defaults are the engine's (process.Default*).
		{"immediate-retries", defaults.ImmediateRetries, "times a failing handler runs again at once, within one attempt, before the attempt is recorded as failed (-1 or 0: none)",
			"times a failing handler runs again at once, within one attempt, before the attempt is recorded as failed; `-1` (or `0`): none (see [Recoverability](#recoverability))",
			num(&c.immediateRetries)},
		{"max-attempts", defaults.MaxAttempts, "recorded handler attempts before an event is DEAD",
			"recorded attempts before `DEAD`",
			num(&c.MaxAttempts)},
		{"retry-base-delay", defaults.RetryBaseDelay, "delay after the first failed attempt; it doubles per attempt up to retry-max-delay, ±10%",
			"delay after the first failed attempt; it doubles per attempt, ±10%",
			dur(&c.RetryBaseDelay)},
		{"retry-max-delay", defaults.RetryMaxDelay, "longest delay between two attempts",
			"longest delay between two attempts",
			dur(&c.RetryMaxDelay)},
		{"process-batch-size", defaults.ProcessBatchSize, "events per processing transaction, at most (on CockroachDB, lower it if batches keep conflicting; see README)",
			"events per processing transaction, at most (see \"Batches and CockroachDB\")",
			num(&c.ProcessBatchSize)},
		{"handler-timeout", defaults.HandlerTimeout, "how long one handler run may take; it then fails (the attempt counts) and its transaction is rolled back; also the processing transactions' statement_timeout",
			"bound of one handler run (and the processing transactions' `statement_timeout`); an overrun is a failed attempt, and a handler that ignores its context is abandoned with its transaction",
			dur(&c.HandlerTimeout)},
		{"webhook-process-timeout", defaults.WebhookProcessTimeout, "how long the webhook may process one changefeed batch, detached from the sink's request (which ends after webhook_client_timeout; the sink's retries join the batch); at least handler-timeout",
			"how long the webhook may process one changefeed batch. It runs detached from the sink's request, so the sink's `webhook_client_timeout` does not roll it back, and a retry of it joins it (see \"Webhook timeouts\"); at least `INBOXD_HANDLER_TIMEOUT`",
			dur(&c.WebhookProcessTimeout)},
		{"sweep-interval", defaults.SweepInterval, "how often the sweeper looks for due retries and undelivered events",
			"sweeper period",
			dur(&c.SweepInterval)},
		{"sweep-grace", time.Duration(defaults.SweepGrace), "how long a RECEIVED event waits for the changefeed before the sweeper processes it; 0 means none on PostgreSQL and 30s on CockroachDB",
			"how long a `RECEIVED` event waits for the feed; 0 means none on PostgreSQL, 30s on CockroachDB",
			dur(&c.SweepGrace)},
		{"outbox-poll-interval", defaults.OutboxPollInterval, "how often the outbox relay looks for unsent messages when nothing woke it (PostgreSQL wakes it on commit)",
			"outbox relay's safety-net poll; on PostgreSQL a commit that emitted wakes it at once (LISTEN/NOTIFY)",
			dur(&c.OutboxPollInterval)},
		{"outbox-batch-size", defaults.OutboxBatchSize, "outbox messages claimed per relay pass, at most",
			"outbox messages claimed per relay pass",
			num(&c.OutboxBatchSize)},
		{"outbox-lease", defaults.OutboxLease, "how long a relay holds the outbox messages it claimed before another instance may take them",
			"how long a relay holds its claimed messages; it stops publishing them at ¾ of it, so two instances never publish one at once",
			dur(&c.OutboxLease)},
		{"outbox-retention", defaults.OutboxRetention, "how long sent outbox messages are kept before deletion",
			"sent outbox messages are deleted after this long (in batches of 1000)",
			dur(&c.OutboxRetention)},
		{"retention", defaults.Retention, "how long PROCESSED and REJECTED journal entries are kept (the dedup window); -1s or 0 keeps them forever",
			"how long `PROCESSED` and `REJECTED` entries are kept after their last update: the dedup window (see Retention); `-1s` (or `0`) keeps them forever",
			dur(&c.retention)},
		{"quarantine-retention", defaults.QuarantineRetention, "how long quarantined messages are kept; -1s or 0 keeps them forever",
			"how long quarantined messages are kept; `-1s` (or `0`) keeps them forever",
			dur(&c.quarantineRetention)},
		{"shutdown-timeout", defaults.ShutdownTimeout, "how long a graceful shutdown may take",
			"bound of the whole graceful shutdown (all steps together)",
			dur(&c.ShutdownTimeout)},
		{"stall-after", defaults.StallAfter, "/readyz reports ingest, processing or the feed unhealthy after this long without progress while work waits, or failing",
			"`/readyz` reports ingest, processing or the feed stuck after this long without progress while work waits",
			dur(&c.StallAfter)},
		{"log-format", defaults.LogFormat, "text or json",
			"slog output",
			str(&c.LogFormat)},
		{"log-level", defaults.LogLevel, "debug, info, warn or error",
			sharesRowAbove,
			str(&c.LogLevel)},
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
