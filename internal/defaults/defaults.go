// Package defaults is inboxd's one table of default values and of settings
// (Settings). The command line's flags (their documented defaults), the library's
// Config.WithDefaults and every component's own zero-value handling read the same
// constants here, so a component used directly, in a test or by a future caller,
// behaves as the product does.
//
// It imports nothing of inboxd's, so that every package can use it.
package defaults

import (
	"runtime"
	"time"
)

// Or is v, or def when v is zero or negative: the rule of every component's Config,
// whose zero fields take the product's defaults.
func Or[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// The command line's own: a library caller gives a pool and a logger instead.
const (
	DatabaseURL = "postgres://postgres@127.0.0.1:5432/inboxd?sslmode=disable"
	LogFormat   = "text"
	LogLevel    = "info"
)

// The broker.
const (
	StompAddr = "127.0.0.1:61613"
	// Broker is the broker's STOMP dialect: activemq, rabbitmq, or auto (detected from
	// the CONNECTED frame's server header).
	Broker           = "auto"
	Destination      = "/queue/registrations"
	ClientID         = "inboxd"
	SubscriptionName = "inboxd"
	// StompHeartBeat is the STOMP heart-beat both ways.
	StompHeartBeat = 10 * time.Second
)

// The REST API and the changefeed webhook.
const (
	// HTTPAddr is the command line's API address, on every interface: a service's.
	HTTPAddr = ":8090"
	// LibraryHTTPAddr is the library's (Config.HTTPAddr): loopback, so that a program
	// embedding inboxd opens no port to the network it did not ask for.
	LibraryHTTPAddr = "127.0.0.1:8090"
	// WebhookAddr and CertDir are the command line's; the library serves the webhook
	// with them on CockroachDB only, unless Config.WebhookAddr asks for it.
	WebhookAddr = ":8443"
	WebhookURL  = "webhook-https://localhost:8443/changefeed"
	CertDir     = "var/certs"
	// CertHosts is comma-separated, as its flag takes it.
	CertHosts = "localhost,127.0.0.1,inboxd"
	// WebhookProcessTimeout bounds one changefeed batch's processing, detached from the
	// sink's request.
	WebhookProcessTimeout = 5 * time.Minute
	// WebhookBatchesInFlight bounds the batches the webhook processes at once.
	WebhookBatchesInFlight = 64
	// WebhookResolvedAhead bounds how far a resolved timestamp may run ahead of the clock.
	WebhookResolvedAhead = 10 * time.Minute
	// PublishTimeout bounds one publish to the broker (the API's and the relay's).
	PublishTimeout = 10 * time.Second
)

// Ingest.
const (
	BatchSize       = 500
	BatchLinger     = 5 * time.Millisecond
	CommitsInFlight = 2
	Prefetch        = 2000
	// AckMode is "client": one cumulative ack per batch.
	AckMode = "client"
	// MaxBodyBytes: larger message bodies are quarantined.
	MaxBodyBytes = 256 << 10
	// MaxStatementBytes bounds one SQL statement carrying message bytes, parameters
	// included: half of CockroachDB's 16 MiB client-message limit (package sqlbound).
	MaxStatementBytes = 8 << 20
	// MaxInflightBytes bounds the message bytes one destination holds unacked: 2000
	// prefetched messages of 256 KiB would be 500 MiB.
	MaxInflightBytes = 64 << 20
	IDSource         = "payload:id"
	// CommitTimeout bounds one ingest transaction, which runs detached from shutdown.
	CommitTimeout = 30 * time.Second
)

// The command line's garbage collector, set when the process starts unless the
// operator's GOGC or GOMEMLIMIT says otherwise (package gctune). The library leaves a
// host program's collector alone.
const (
	// GCPercent is GOGC: the heap may grow to 5× what is live before a collection.
	// Go's default of 100 spent 0.21 CPU s per 10k events in the ingest row against
	// 0.15 with 400 (inboxd bench, alternated, same run).
	GCPercent = 400
	// MemoryLimit is GOMEMLIMIT, the soft limit that makes the collector run sooner as
	// the heap nears it, so that a burst does not grow the heap 5×. It is lowered to
	// three quarters of the cgroup's memory limit when that is smaller.
	MemoryLimit = 512 << 20
)

// Processing and its recoverability policy.
const (
	// NoHandler is what becomes of an event whose type has no handler: "retry" (a
	// failed attempt like any other, as River does with a job of no registered worker),
	// "reject" or "park" (docs/recoverability.md).
	NoHandler        = "retry"
	ImmediateRetries = 2
	MaxAttempts      = 40
	RetryBaseDelay   = time.Second
	RetryMaxDelay    = 10 * time.Minute
	ProcessBatchSize = 100
	HandlerTimeout   = 30 * time.Second
	// MinStatementTimeout floors the processing transactions' statement_timeout, which
	// is HandlerTimeout otherwise: it bounds the engine's own statements too (claim,
	// outcomes, heads), which a short handler budget must not cancel under load.
	MinStatementTimeout = 5 * time.Second
	SweepInterval       = 200 * time.Millisecond
	// KickLinger: a worker kicked by an ingest commit claims this long after it, with
	// the commits of that time (process.Config.KickLinger).
	KickLinger = 20 * time.Millisecond
	// SweepGrace is how long a RECEIVED event waits for push before the sweeper takes
	// it: none on PostgreSQL, whose push is in-process and NOTIFY.
	SweepGrace = 0
	// SweepGraceCockroachDB leaves a RECEIVED event to the changefeed that long: there
	// the sweeper is only the safety net.
	SweepGraceCockroachDB = 30 * time.Second
)

// Concurrency is the default number of processing transactions at once: one batch
// transaction per CPU this process may use, at least 2. A worker runs a batch of up to
// ProcessBatchSize events, so a few workers keep the database busy; more only contend
// for its locks and cores. Measured on 2 cores (inboxd bench, same run): 8 workers
// drained 0.46–0.48× as fast as ingest alone, 2 workers 0.61–0.73×, with the p99 at
// 1,000 msg/s down from 234 ms to 46 ms.
func Concurrency() int { return max(2, runtime.GOMAXPROCS(0)) }

// Retention.
const (
	Retention           = 7 * 24 * time.Hour
	QuarantineRetention = 30 * 24 * time.Hour
	// RetentionInterval is how often the PostgreSQL pruner runs, RetentionBatch the rows
	// one delete takes, RetentionPause the pause between deletes.
	RetentionInterval = time.Minute
	RetentionBatch    = 1000
	RetentionPause    = 200 * time.Millisecond
)

// The outbox relay.
const (
	OutboxPollInterval = time.Second
	OutboxBatchSize    = 100
	OutboxLease        = 30 * time.Second
	OutboxRetention    = 24 * time.Hour
	// OutboxRetryMaxDelay caps the backoff of a message the broker refused: 1s, doubling.
	OutboxRetryMaxDelay = 5 * time.Minute
	// OutboxPublishers is how many broker connections the relay publishes on.
	OutboxPublishers = 4
	// OutboxCleanupInterval and OutboxCleanupBatch pace the deletion of sent messages.
	OutboxCleanupInterval = time.Minute
	OutboxCleanupBatch    = 1000
)

// The process.
const (
	ShutdownTimeout = 30 * time.Second
	StallAfter      = 60 * time.Second
)

// Migrations.
const (
	// MigrationLease is how long a migrator's lock row holds on CockroachDB, which has no
	// advisory locks, before another migrator may take it; the holder renews it every
	// third of it while it migrates, and stops (ErrLeaseLost) once three quarters of it
	// have passed since its last successful renewal.
	MigrationLease = 30 * time.Second
)

// Setting is one row of the table of settings: a flag of the command line, which the
// environment variable INBOXD_<FLAG> (capitals, "_" for "-") sets too, and the field it
// fills. Package internal/config makes the flags from these rows, and its
// TestConfigTable writes docs/configuration.md's table from them.
type Setting struct {
	Flag string
	// Field is the field the setting fills: inboxd.Config's, whose doc TestConfigDocs
	// holds to Default, or the command line's own (internal/config.Config).
	Field string
	// Default is the built-in default: a string, int, bool or time.Duration ("" or false:
	// none), mostly a constant above, which the components' zero values take too.
	Default any
	Usage   string // the flag's help
	// README is the meaning cell of the setting's row in docs/configuration.md, optionally preceded by a
	// default cell of its own and " | " when the default is not a literal (CPUs, or a
	// default that depends on another setting); SharesRowAbove lists the variable in the
	// row above instead.
	README string
}

// SharesRowAbove documents a setting in the docs table's row above it (e.g. a login beside its
// passcode).
const SharesRowAbove = "\x00above"

// Settings is the one table of settings, a row each, in the order of docs/configuration.md's
// configuration table.
//
// Adding a setting touches three files:
//  1. here: its default (a constant above) and its row;
//  2. config.go of package inboxd: its Config field, documented "… (INBOXD_X). Defaults
//     to Y." (TestConfigDocs), and its line in WithDefaults;
//  3. the component that reads it: a field of its Config with the same name, or the
//     name less the component's prefix (OutboxLease → outbox.Config.Lease), which
//     takes the constant when zero (defaults.Or).
//
// Then regenerate docs/configuration.md's table: go test ./internal/config -run
// TestConfigTable -update. The root package copies the field into the
// component's Config by name (copySettings in parts.go; TestEverySettingReachesAComponent
// fails for a setting that reaches no component), and the component's
// TestZeroConfigTakesTheTable holds its zero value to the default (Unlike). Only a
// setting that changes name, type or meaning on the way needs a line in parts.go, and
// only a flag whose text means something else than its field's value (http-addr: empty
// turns the API off) a setter in internal/config.
func Settings() []Setting {
	return []Setting{
		{"database-url", "DatabaseURL", DatabaseURL, "PostgreSQL or CockroachDB connection URL",
			"PostgreSQL or CockroachDB"},
		{"database-password-file", "DatabasePasswordFile", "", "file holding the database password, used instead of one in the URL (not world-readable)",
			"file holding the database password, applied to the connection config (see [Secrets](#secrets))"},
		{"stomp-addr", "StompAddr", StompAddr, "broker STOMP address host:port (ActiveMQ, or RabbitMQ's STOMP plugin)",
			"the broker's STOMP listener: ActiveMQ, or RabbitMQ's STOMP plugin (see [RabbitMQ](rabbitmq.md))"},
		{"broker", "Broker", Broker, "broker STOMP dialect: activemq, rabbitmq, or auto (from the CONNECTED frame's server header)",
			"the broker's STOMP dialect: `activemq`, `rabbitmq`, or `auto` (from the `server` header of the `CONNECTED` frame)"},
		{"stomp-host", "StompHost", "", "STOMP host header: RabbitMQ's virtual host (empty: / for broker rabbitmq, else the host of stomp-addr)",
			"the `host` header of `CONNECT`: RabbitMQ's virtual host. Empty: `/` with `INBOXD_BROKER=rabbitmq`, else the host of `INBOXD_STOMP_ADDR` (which ActiveMQ ignores)"},
		{"stomp-login", "StompLogin", "", "STOMP login",
			"STOMP credentials"},
		{"stomp-passcode", "StompPasscode", "", "STOMP passcode (a flag is visible in ps: prefer the env or -stomp-passcode-file)",
			SharesRowAbove},
		{"stomp-passcode-file", "StompPasscodeFile", "", "file holding the STOMP passcode (not world-readable; trailing newline trimmed)",
			"file holding the STOMP passcode (see [Secrets](#secrets))"},
		{"stomp-heart-beat", "StompHeartBeat", StompHeartBeat, "STOMP heart-beat interval both ways; a silent broker is noticed within 1.5 intervals (negative: off)",
			"STOMP heart-beat interval, both ways; inboxd asks the broker for a beat every half interval and drops a connection silent for 1.5 intervals, so a blackholed broker is noticed within two (negative: off)"},
		{"stomp-tls", "StompTLS", false, "speak TLS to the broker (ActiveMQ stomp+ssl); never falls back to plaintext",
			"TLS to the broker's `stomp+ssl` connector; never falls back to plaintext (see [Broker over TLS](activemq.md#broker-over-tls))"},
		{"stomp-ca-file", "StompCAFile", "", "PEM CA bundle that signs the broker's certificate (empty: the system pool)",
			"PEM CA bundle that signs the broker's certificate; empty: the system pool"},
		{"stomp-server-name", "StompServerName", "", "name the broker's certificate must carry (empty: the host of stomp-addr)",
			"name the broker's certificate must carry; empty: the host of `INBOXD_STOMP_ADDR`"},
		{"stomp-cert-file", "StompCertFile", "", "client certificate (PEM) for mutual TLS",
			"client certificate and key (PEM) for mutual TLS; the key file must not be world-readable"},
		{"stomp-key-file", "StompKeyFile", "", "client key (PEM) for mutual TLS; not world-readable",
			SharesRowAbove},
		{"stomp-tls-insecure-skip-verify", "StompTLSInsecureSkip", false, "INSECURE: accept any broker certificate (anyone on the path can read and change messages)",
			"**insecure**: accept any broker certificate (logged as a warning at start)"},
		{"destination", "Destinations", Destination, "STOMP destination(s) to consume, comma-separated; /topic/ ones get a durable subscription. The first is where POST /registration publishes unless publish-destination is set",
			"comma-separated destinations to consume. `/topic/…` ones get a durable subscription"},
		{"publish-destination", "PublishDestination", "", "where POST /registration publishes, e.g. /topic/VirtualTopic.registrations (empty: the first destination)",
			"empty: the first destination | where the demo's `POST /registration` publishes, e.g. `/topic/VirtualTopic.registrations`"},
		{"client-id", "ClientID", ClientID, "durable topic subscriptions: client id; the connection of /topic/T connects as <client-id>.T. Keep it stable, one per application",
			"durable subscriptions: the connection for `/topic/T` connects with client id `<client-id>.T`. Keep it stable, and use one per application"},
		{"subscription-name", "SubscriptionName", SubscriptionName, "durable topic subscriptions: activemq.subscriptionName. Keep it stable",
			"durable subscriptions: `activemq.subscriptionName`. Keep it stable"},
		{"non-durable-topics", "NonDurableTopics", false, "subscribe /topic/ destinations non-durably, losing every event published while inboxd is disconnected",
			"`true` subscribes topics non-durably, which loses every event published while inboxd is disconnected. Without it, a topic with an empty client id or subscription name is refused at start"},
		{"http-addr", "HTTPAddr", HTTPAddr, "REST API listen address",
			"REST API (the library's `Config.HTTPAddr` defaults to loopback, `127.0.0.1:8090`)"},
		{"admin-token", "AdminToken", "", "bearer token required by /admin endpoints and accepted by /journal (empty: /admin served to localhost only)",
			"bearer token for `/admin/*`, also accepted by `/journal/*`; empty: `/admin/*` is served to localhost only, or to nobody when `INBOXD_READ_TOKEN` is set (see [SECURITY.md](../SECURITY.md))"},
		{"admin-token-file", "AdminTokenFile", "", "file holding the admin token (not world-readable)",
			"file holding the admin token"},
		{"read-token", "ReadToken", "", "bearer token required by /journal reads, which hold personal data (empty, with no admin token: served to localhost only)",
			"bearer token for the journal reads (`/journal/*`, personal data); empty, with no admin token: served to localhost only. It never opens `/admin/*`"},
		{"read-token-file", "ReadTokenFile", "", "file holding the read token (not world-readable)",
			"file holding the read token"},
		{"webhook-addr", "WebhookAddr", WebhookAddr, "changefeed webhook HTTPS listen address: unset, served (with generated certificates in cert-dir) on CockroachDB only; empty: off",
			"changefeed webhook, HTTPS. Unset, it is served, with its generated certificates in `INBOXD_CERT_DIR`, on CockroachDB only, whose changefeeds need it; on PostgreSQL only when set. Empty: off"},
		{"webhook-url", "WebhookURL", WebhookURL, "sink URL the changefeed posts to",
			"the sink URL the changefeed posts to: `webhook-https://host[:port][/path]`, without credentials or query (checked at start unless the webhook is off)"},
		{"webhook-token", "WebhookToken", "", "bearer token the changefeed must send (webhook_auth_header); empty: generated once into cert-dir/webhook-token (0600), which changefeed create uses",
			"the changefeed must send `Authorization: Bearer <token>`; empty: generated once into `INBOXD_CERT_DIR/webhook-token` (0600), which `inboxd changefeed create` sends. The webhook is never open"},
		{"webhook-token-file", "WebhookTokenFile", "", "file holding the webhook token (not world-readable)",
			"file holding the webhook token"},
		{"cert-dir", "CertDir", CertDir, "directory for the generated webhook CA and certificate",
			"generated CA, server certificate and webhook token; `ca.b64` there is the value for `ca_cert=`. Narrowed to 0700 if more open; a key or token file others can read is refused"},
		{"cert-file", "CertFile", "", "webhook TLS certificate file (PEM); generated when empty",
			"your own webhook certificate instead; the key file must not be world-readable"},
		{"key-file", "KeyFile", "", "webhook TLS key file (PEM)",
			SharesRowAbove},
		{"cert-hosts", "CertHosts", CertHosts, "host names and IPs of the generated certificate, comma-separated",
			"names of the generated certificate"},
		{"batch-size", "BatchSize", BatchSize, "messages per ingest transaction, at most",
			"messages per ingest statement, at most"},
		{"batch-linger", "BatchLinger", BatchLinger, "how long a partial ingest batch waits for more messages",
			"how long a partial batch waits"},
		{"commits-in-flight", "CommitsInFlight", CommitsInFlight, "ingest batches of one destination written at once (acks stay in order)",
			"batches of one destination written at once; acks stay in dispatch order"},
		{"prefetch", "Prefetch", Prefetch, "broker prefetch per subscription (ActiveMQ activemq.prefetchSize, RabbitMQ prefetch-count); must exceed batch-size",
			"unacked messages per subscription: ActiveMQ's `activemq.prefetchSize`, RabbitMQ's `prefetch-count`; must exceed the batch size"},
		{"ack-mode", "AckMode", AckMode, "client (one cumulative ack per batch) or client-individual",
			"`client` (one cumulative ack per batch) or `client-individual`"},
		{"max-body-bytes", "MaxBodyBytes", MaxBodyBytes, "larger message bodies are quarantined",
			"larger bodies are quarantined as `too_large`"},
		{"max-statement-bytes", "MaxStatementBytes", MaxStatementBytes, "one SQL statement carrying message bytes, parameters included, at most; keep it well under CockroachDB's sql.conn.max_read_buffer_message_size (16 MiB); max-body-bytes must fit one",
			"one SQL statement carrying message bytes, parameters included, at most. CockroachDB refuses any client message over `sql.conn.max_read_buffer_message_size` (16 MiB by default, SQLSTATE 08P01), so an ingest batch is closed before it outgrows one statement and written as several if it must; `INBOXD_MAX_BODY_BYTES` must fit one (checked at start). A message too large for one statement is quarantined `too_large` with its first bytes and a SHA-256 of the whole body, and cannot be re-injected"},
		{"max-inflight-bytes", "MaxInflightBytes", MaxInflightBytes, "message bytes one destination holds unacked, at most; past it the prefetch shrinks to fit the largest bodies",
			"message bytes one destination holds unacked, at most: past it, ingest commits what it took and subscribes again with a prefetch that fits the largest bodies (for a minute)"},
		{"id-source", "IDSource", IDSource, "where a message's event id is read: payload:FIELD (a top-level payload field), header:NAME (a STOMP header, e.g. header:message-id, the JMS message id), or cloudevents (only CloudEvents are accepted); any string, UUID or not. CloudEvents are always keyed by source and id",
			"where the event id is read: `payload:FIELD`, `header:NAME` (e.g. `header:message-id`), or `cloudevents` (only CloudEvents accepted); any non-empty string up to 1 KiB, UUID or not. CloudEvents are always keyed by `source` + `id`"},
		{"default-event-type", "DefaultEventType", "", "event type of messages with no event-type header and no type field (empty: they are quarantined as missing_type; with demo, registration)",
			"empty (`registration` with `INBOXD_DEMO`) | type of events that name none (`event-type` header, else payload `type`); empty: such messages are quarantined as `missing_type`"},
		{"migrate", "MigrateAtStart", "off", "auto: serve applies pending migrations at start, under the migration lock (needs the schema owner's DDL rights); off: serve changes no schema and refuses one that is behind (run inboxd migrate first) or ahead by migrations that are not compatible",
			"`auto`: `serve` applies pending migrations at start (and with `INBOXD_DEMO` the `customers` table), under the migration lock, and on CockroachDB sets the row-level TTL of the retention configured, as `inboxd migrate` does; it then needs the schema owner's rights. `off`: it changes no schema (see [Deploying](operations.md#deploying))"},
		{"demo", "Demo", false, "serve the demo (what make demo runs): the registration handler, GET /registration/form and POST /registration; with migrate, its customers table",
			"serve the demo, as `make demo` and docker compose do: the registration handler (unless the program registered its own), `GET /registration/form` and `POST /registration`; its `customers` table is created by `inboxd migrate` with `INBOXD_DEMO` (or `serve` with `INBOXD_MIGRATE=auto`). Off, inboxd knows no business event and opens no door that publishes into your queues"},
		{"concurrency", "Concurrency", Concurrency(), "processing transactions (batches of different aggregates) at once; default: the number of CPUs, at least 2",
			"CPUs, at least 2 | processing transactions at once, each a batch of up to `INBOXD_PROCESS_BATCH_SIZE` events of different aggregates. More workers than the database has cores only contend: raise it only with a database that has the cores, or with handlers that wait on calls outside the database"},
		// The recoverability policy; its defaults are the engine's (process.Default*).
		{"immediate-retries", "ImmediateRetries", ImmediateRetries, "times a failing handler runs again at once, within one attempt, before the attempt is recorded as failed (-1 or 0: none)",
			"times a failing handler runs again at once, within one attempt, before the attempt is recorded as failed; `-1` (or `0`; in `inboxd.Config` only `-1`, since a zero field takes the default): none (see [Recoverability](recoverability.md))"},
		{"max-attempts", "MaxAttempts", MaxAttempts, "recorded handler attempts before an event is DEAD",
			"recorded attempts before `DEAD`"},
		{"retry-base-delay", "RetryBaseDelay", RetryBaseDelay, "delay after the first failed attempt; it doubles per attempt up to retry-max-delay, ±10%",
			"delay after the first failed attempt; it doubles per attempt, ±10%"},
		{"retry-max-delay", "RetryMaxDelay", RetryMaxDelay, "longest delay between two attempts",
			"longest delay between two attempts"},
		{"no-handler", "NoHandler", NoHandler, "an event whose type has no handler: retry (a failed attempt, retried until DEAD), reject (REJECTED at once) or park (held, attempted again when a Client starts with a handler for its type)",
			"an event whose type has no handler: `retry`, a failed attempt retried until `DEAD`; `reject`, `REJECTED` at once; `park`, held without further attempts until an instance starts with a handler for its type (see [Recoverability](recoverability.md))"},
		{"process-batch-size", "ProcessBatchSize", ProcessBatchSize, "events per processing transaction, at most (on CockroachDB, lower it if batches keep conflicting; see docs/cockroachdb.md)",
			"events per processing transaction, at most (see \"Batches and CockroachDB\")"},
		{"handler-timeout", "HandlerTimeout", HandlerTimeout, "how long one handler run may take; it then fails (the attempt counts) and its transaction is rolled back; also the processing transactions' statement_timeout (at least 5s)",
			"bound of one handler run (and the processing transactions' `statement_timeout`, at least 5s); an overrun is a failed attempt, and a handler that ignores its context is abandoned with its transaction"},
		{"webhook-process-timeout", "WebhookProcessTimeout", WebhookProcessTimeout, "how long the webhook may process one changefeed batch, detached from the sink's request (which ends after webhook_client_timeout; the sink's retries join the batch); at least handler-timeout",
			"how long the webhook may process one changefeed batch. It runs detached from the sink's request, so the sink's `webhook_client_timeout` does not roll it back, and a retry of it joins it (see \"Webhook timeouts\"); at least `INBOXD_HANDLER_TIMEOUT`"},
		{"sweep-interval", "SweepInterval", SweepInterval, "how often the sweeper looks for due retries and undelivered events",
			"sweeper period"},
		{"sweep-grace", "SweepGrace", time.Duration(SweepGrace), "how long a RECEIVED event waits for the changefeed before the sweeper processes it; 0 means none on PostgreSQL and 30s on CockroachDB",
			"how long a `RECEIVED` event waits for the feed; 0 means none on PostgreSQL, 30s on CockroachDB"},
		{"outbox-poll-interval", "OutboxPollInterval", OutboxPollInterval, "how often the outbox relay looks for unsent messages when nothing woke it (PostgreSQL wakes it on commit)",
			"outbox relay's safety-net poll; on PostgreSQL a commit that emitted wakes it at once (LISTEN/NOTIFY)"},
		{"outbox-batch-size", "OutboxBatchSize", OutboxBatchSize, "outbox messages claimed per relay pass, at most",
			"outbox messages claimed per relay pass"},
		{"outbox-lease", "OutboxLease", OutboxLease, "how long a relay holds the outbox messages it claimed before another instance may take them",
			"how long a relay holds its claimed messages; it stops publishing them at ¾ of it, so two instances never publish one at once"},
		{"outbox-retention", "OutboxRetention", OutboxRetention, "how long sent outbox messages are kept before deletion",
			"sent outbox messages are deleted after this long (in batches of 1000)"},
		{"outbox-retry-max-delay", "OutboxRetryMaxDelay", OutboxRetryMaxDelay, "longest wait before the relay publishes again a message the broker refused; the wait starts at 1s and doubles per attempt",
			"longest wait before the relay publishes again a message the broker refused (1s, doubling per attempt); the later messages of its group wait with it, and after a broker outage they go again within this long"},
		{"retention", "Retention", Retention, "how long PROCESSED and REJECTED journal entries are kept (the dedup window); -1s or 0 keeps them forever",
			"how long `PROCESSED` and `REJECTED` entries are kept after their last update: the dedup window (see [Retention](operations.md#retention)); replay runs that ended are kept as long after they ended; `-1s` (or `0`; in `inboxd.Config` only a negative value, since a zero field takes the default) keeps them forever"},
		{"quarantine-retention", "QuarantineRetention", QuarantineRetention, "how long quarantined messages are kept; -1s or 0 keeps them forever",
			"how long quarantined messages are kept; `-1s` (or `0`; in `inboxd.Config` only a negative value, since a zero field takes the default) keeps them forever"},
		{"shutdown-timeout", "ShutdownTimeout", ShutdownTimeout, "how long a graceful shutdown may take",
			"bound of the whole graceful shutdown (all steps together)"},
		{"stall-after", "StallAfter", StallAfter, "/readyz reports ingest, processing or the feed unhealthy after this long without progress while work waits, or failing",
			"`/readyz` reports ingest, processing or the feed stuck after this long without progress while work waits"},
		{"log-format", "LogFormat", LogFormat, "text or json",
			"slog output"},
		{"log-level", "LogLevel", LogLevel, "debug, info, warn or error",
			SharesRowAbove},
	}
}
