// Package defaults is inboxd's one table of default values. The command line's flags
// (their documented defaults), the library's Config.WithDefaults and every component's
// own zero-value handling read the same constants here, so a component used directly,
// in a test or by a future caller, behaves as the product does.
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

// Processing and its recoverability policy.
const (
	ImmediateRetries = 2
	MaxAttempts      = 40
	RetryBaseDelay   = time.Second
	RetryMaxDelay    = 10 * time.Minute
	ProcessBatchSize = 100
	HandlerTimeout   = 30 * time.Second
	SweepInterval    = 200 * time.Millisecond
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
	// third of it while it migrates.
	MigrationLease = 30 * time.Second
)
