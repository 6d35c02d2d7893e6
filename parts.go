package inboxd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/health"
	"github.com/inboxd/inboxd/internal/ingest"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/lifecycle"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/notifier"
	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/replay"
	"github.com/inboxd/inboxd/internal/retention"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/schema"
)

// assembly is what a Run builds its parts from: the Client's settings and state.
type assembly struct {
	pool *pgxpool.Pool
	cfg  Config
	tls  *stompx.TLS
	log  *slog.Logger
	reg  *process.Registry
	m    *metrics.Metrics
	tp   trace.TracerProvider
}

// schema migrates the database when the Config says so (MigrateAtStart), as Migrate with
// WithRetention(cfg) does, the row-level TTL on CockroachDB included; otherwise it only
// checks, without DDL, that its schema is one this release serves. Either way the
// schema is checked: schema.Migrate checks it after migrating, since it skips the
// migrations it does not know, which a newer release may have recorded.
func (c assembly) schema(ctx context.Context, dialect database.Dialect) error {
	if !c.cfg.MigrateAtStart {
		return schema.Check(ctx, c.pool)
	}
	applied, err := migrate(ctx, c.pool, dialect, retentionOf(c.cfg), c.log)
	for _, name := range applied {
		c.log.Info("applied migration", "name", name)
	}
	if err != nil {
		return fmt.Errorf("at start: %w", err)
	}
	return nil
}

// run assembles the parts from the configuration and runs them in three stages, which
// stop in this order, so that exactly-once holds through a shutdown:
//   - intake: ingest, which finishes its batch in flight (commit then ack, or neither);
//   - work: the sweeper, push, the outbox relay, the webhook and the pruner, which
//     finish their transactions;
//   - serving: the API, the health monitor and the notifier, which the others use.
func (c assembly) run(ctx context.Context) error {
	cfg, log := c.cfg, c.log
	if max, min := c.pool.Config().MaxConns, cfg.MinPoolSize(); max < min {
		// Not fatal: parts wait for a connection, and throughput suffers.
		log.Warn("the database pool is smaller than inboxd needs; parts will wait for connections: "+
			"set pgxpool.Config.MaxConns to at least Config.MinPoolSize() before pgxpool.NewWithConfig",
			"max_conns", max, "want_at_least", min)
	}
	dialect, err := database.Detect(ctx, c.pool)
	if err != nil {
		return err
	}
	if err := c.schema(ctx, dialect); err != nil {
		return err
	}
	cfg = cfg.withWebhook(dialect)
	// The types with handlers, once: a type name misspelt here or by a producer shows.
	types := c.reg.Types()
	log.Info("handlers registered", "types", types, "no_handler", cfg.NoHandler)
	if n, err := journal.WakeNoHandler(ctx, c.pool, types); err != nil {
		return err
	} else if n > 0 {
		log.Info("events that found no handler are due again: their type has one now", "events", n)
	}
	if cfg.SweepGrace == 0 && dialect.Changefeed() {
		// The changefeed delivers each event as it is journaled; the sweeper is only its safety net there.
		cfg.SweepGrace = defaults.SweepGraceCockroachDB
	}
	log.Info("sweeper", "interval", cfg.SweepInterval, "grace", cfg.SweepGrace)
	// The shutdown budget, split explicitly between the stages that need a bound of
	// their own: intake its batch in flight, the work its transactions and webhook
	// batches, the API its requests.
	// Intake's share bounds the polite disconnect after its last commit, which ingest
	// bounds itself (ingest.Config.CommitTimeout).
	budget := lifecycle.Split(cfg.ShutdownTimeout, 1, 2, 1)
	intakeBudget, workBudget, servingBudget := budget[0], budget[1], budget[2]

	stompCfg := cfg.stomp(c.tls, log)
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
	parts, err := cfg.components(stompCfg)
	if err != nil {
		return err
	}
	// A newer release contracting the schema under this one is logged once for the
	// instance, whichever part finds it, and makes /readyz say so.
	contraction := &journal.Contraction{Log: log.With("component", "schema")}
	ic := parts.ingest
	ic.Logger, ic.Metrics, ic.Contraction = log.With("component", "ingest"), c.m, contraction
	ic.OnCommit = func(int) { kick() }
	ic.StopTimeout = intakeBudget
	sub, err := ingest.New(ic, c.pool)
	if err != nil {
		return fmt.Errorf("configuring ingest: %w", err)
	}

	pc := parts.process
	pc.Dialect, pc.Contraction = dialect, contraction
	engine := process.New(c.pool, c.reg, pc, c.m, log.With("component", "process"))
	sc := parts.sweeper
	sc.StopTimeout = workBudget
	sweeper := process.NewSweeper(engine, sc)
	// One LISTEN connection, outside the pool, for push and the relay: PostgreSQL only
	// (on CockroachDB the changefeeds wake them).
	var ntf *notifier.Notifier
	if dialect.Listen() {
		ntf = notifier.New(c.pool.Config().ConnConfig, log.With("component", "notifier"))
		push = process.NewPush(engine, c.pool, ntf)
	}

	mon := health.New(health.Config{DB: c.pool, Metrics: c.m, Ingest: sub.Health, StallAfter: cfg.StallAfter,
		Grace: cfg.SweepGrace, Feed: dialect.Changefeed() && !cfg.DisableWebhook, Contraction: contraction,
		Log: log.With("component", "health")})
	var apiSrv *api.Server
	if !cfg.DisableHTTP {
		if apiSrv, err = c.newAPI(ctx, cfg, dialect, stompCfg, publisher, sub, mon, servingBudget); err != nil {
			return err
		}
	}

	// The outbox relay publishes on connections of its own, apart from the API's.
	relayPub := stompx.NewPublisher(stompCfg, defaults.OutboxPublishers)
	defer relayPub.Close()
	oc := parts.outbox
	oc.Notifier = ntf
	relay := outbox.NewRelay(c.pool, relayPub, oc, c.m, log.With("component", "outbox"))

	var hook *webhook.Server
	if !cfg.DisableWebhook {
		if hook, err = c.newWebhook(cfg, parts.webhook, engine, relay); err != nil {
			return err
		}
	}

	intake := lifecycle.Stage{Name: "intake", Parts: []lifecycle.Part{{Name: "ingest", Run: func(ctx context.Context) error {
		// The broker is waited for before intake starts, each try logged; the API runs
		// meanwhile, so /readyz can say what is missing.
		if stompx.WaitReachable(ctx, stompCfg, log) != nil {
			return nil // stopped while waiting: nothing to clean up
		}
		return sub.Run(ctx)
	}}}}
	work := lifecycle.Stage{Name: "work", Parts: []lifecycle.Part{
		{Name: "sweeper", Run: sweeper.Run},
		{Name: "outbox relay", Run: relay.Run},
	}}
	if push != nil {
		work.Parts = append(work.Parts, lifecycle.Part{Name: "push", Run: push.Run})
	}
	// Replay runs started (StartReplay) are run here, and taken over after a crash.
	rx := replay.Executor{Pool: c.pool, Dialect: dialect, Registry: c.reg, Log: log.With("component", "replay"),
		Metrics: c.m, Engine: pc}
	work.Parts = append(work.Parts, lifecycle.Part{Name: "replay", Run: func(ctx context.Context) error {
		return replay.RunRunning(ctx, rx, time.Second)
	}})
	if hook != nil {
		work.Parts = append(work.Parts, lifecycle.Part{Name: "webhook", Run: func(ctx context.Context) error {
			return hook.Run(ctx, workBudget)
		}})
	}
	// On CockroachDB row-level TTL (set by the migrating step) deletes expired quarantine
	// rows and attempt history; checkRetention warns when it is not the Config's.
	checkRetention(ctx, c.pool, dialect, cfg, log)
	keep := retentionOf(cfg) // negative: forever, the pruner's zero
	rcfg := pruneConfig(keep, dialect.RowTTL())
	rcfg.Contraction = contraction
	if pruner := retention.New(c.pool, rcfg, log.With("component", "retention")); pruner.Enabled() {
		work.Parts = append(work.Parts, lifecycle.Part{Name: "retention", Run: pruner.Run})
	}
	serving := lifecycle.Stage{Name: "serving", Parts: []lifecycle.Part{{Name: "health", Run: mon.Run}}}
	if apiSrv != nil {
		serving.Parts = append(serving.Parts, lifecycle.Part{Name: "api", Run: apiSrv.Run})
	}
	if ntf != nil {
		serving.Parts = append(serving.Parts, lifecycle.Part{Name: "notifier", Run: ntf.Run})
	}
	log.Info("inboxd running", "destinations", cfg.Destinations, "api", httpAddr(cfg), "webhook", webhookAddr(cfg))
	err = lifecycle.Run(ctx, log, cfg.ShutdownTimeout, intake, work, serving)
	if errors.Is(err, lifecycle.ErrShutdownTimeout) {
		// WARN: nothing is lost (a dependency that hangs is the usual cause), and nobody
		// needs to act.
		log.Warn("shutdown timed out; exiting with work unfinished: the broker redelivers unacked messages, and claims end with their transactions",
			"shutdown_timeout", cfg.ShutdownTimeout)
		return err
	}
	log.Info("inboxd stopped")
	return err
}

func httpAddr(cfg Config) string {
	if cfg.DisableHTTP {
		return ""
	}
	return cfg.HTTPAddr
}

// withWebhook decides whether the changefeed webhook runs: on CockroachDB, whose
// changefeeds need it, at defaults.WebhookAddr unless WebhookAddr says otherwise; on
// PostgreSQL only when WebhookAddr asks for it (the command line's flag does); never
// with DisableWebhook. A webhook that runs gets defaults.CertDir unless CertDir is set.
func (cfg Config) withWebhook(dialect database.Dialect) Config {
	if cfg.WebhookAddr == "" && dialect.Changefeed() {
		cfg.WebhookAddr = defaults.WebhookAddr
	}
	if cfg.WebhookAddr == "" {
		cfg.DisableWebhook = true
	}
	if !cfg.DisableWebhook && cfg.CertDir == "" {
		cfg.CertDir = defaults.CertDir
	}
	return cfg
}

func webhookAddr(cfg Config) string {
	if cfg.DisableWebhook {
		return ""
	}
	return cfg.WebhookAddr
}

// idField is the payload field of an id source "payload:FIELD", or "" (New has checked
// the setting already).
func idField(setting string) string {
	src, err := message.ParseIDSource(setting)
	if err != nil {
		return ""
	}
	field, ok := strings.CutPrefix(src.String(), "payload:")
	if !ok {
		return "" // from a header: the payload holds no id to keep
	}
	return field
}

// newAPI builds the REST API and the console, with the API extensions ctx carries (the
// command line's demo).
func (c assembly) newAPI(ctx context.Context, cfg Config, dialect database.Dialect, stompCfg stompx.Config, publisher *stompx.Publisher,
	sub *ingest.Subscriber, mon *health.Monitor, shutdown time.Duration) (*api.Server, error) {
	apiSrv, err := api.New(api.Config{
		Addr: cfg.HTTPAddr, Pool: c.pool, Dialect: dialect, Publisher: publisher, Destination: cfg.publish(), Extensions: api.ExtensionsFrom(ctx),
		AdminToken: cfg.AdminToken, ReadToken: cfg.ReadToken, Logger: c.log.With("component", "api"), Metrics: c.m,
		AdminTokenSetting: defaults.SettingName(ctx, "AdminToken", "INBOXD_ADMIN_TOKEN"),
		ReadTokenSetting:  defaults.SettingName(ctx, "ReadToken", "INBOXD_READ_TOKEN"),
		Ready: []api.ReadyCheck{
			{Name: "broker", Check: func(ctx context.Context) error { return stompx.Reachable(ctx, stompCfg) }},
			{Name: "ingest", Check: func(ctx context.Context) error {
				// Not ready while a destination is unsubscribed: reconnecting, or a standby
				// whose durable subscription another instance holds.
				if !sub.Ready() {
					return errors.New("not subscribed to every destination (reconnecting, or standby while another instance holds the client id)")
				}
				return mon.ReadyCheck("ingest")(ctx)
			}},
			{Name: "processing", Check: mon.ReadyCheck("processing")},
			{Name: "feed", Check: mon.ReadyCheck("feed")},
		},
		ShutdownTimeout: shutdown, MaxEventBytes: cfg.MaxBodyBytes, IDField: idField(cfg.IDSource),
	})
	if err != nil {
		return nil, fmt.Errorf("configuring the api: %w", err)
	}
	// The console at /ui/ shares the API's server and middleware; its data comes from the API.
	if err := console.Register(apiSrv.Echo(), console.Config{Dialect: dialect, WebhookURL: cfg.WebhookURL,
		SweepInterval: cfg.SweepInterval, SweepGrace: cfg.SweepGrace}); err != nil {
		return nil, fmt.Errorf("configuring the console: %w", err)
	}
	return apiSrv, nil
}

// newWebhook loads (or generates) the webhook's TLS material and token and binds its
// address.
func (c assembly) newWebhook(cfg Config, wc webhook.Config, engine *process.Engine, relay *outbox.Relay) (*webhook.Server, error) {
	hosts := append([]string{}, cfg.CertHosts...)
	if u, err := url.Parse(cfg.WebhookURL); err == nil && u.Hostname() != "" {
		hosts = append(hosts, u.Hostname())
	}
	bundle, err := certs.Load(certs.Config{CertFile: cfg.CertFile, KeyFile: cfg.KeyFile, Dir: cfg.CertDir, Hosts: hosts})
	if err != nil {
		return nil, fmt.Errorf("loading webhook TLS certificate: %w", err)
	}
	for _, p := range bundle.Tightened {
		c.log.Warn("narrowed the permissions of the certificate directory to 0700", "path", p)
	}
	if len(bundle.Generated) > 0 {
		c.log.Info("generated webhook TLS material", "dir", cfg.CertDir, "files", bundle.Generated,
			"ca_cert_file", cfg.CertDir+"/"+certs.CABase64File)
	}
	token, created, err := certs.WebhookToken(cfg.WebhookToken, cfg.CertDir)
	if err != nil {
		return nil, err
	}
	if created {
		c.log.Info("generated the webhook token; inboxd changefeed create sends it",
			"file", filepath.Join(cfg.CertDir, certs.WebhookTokenFile))
	}
	wc.AuthHeader = "Bearer " + token
	h := webhook.New(wc, engine, c.pool, c.m, c.log.With("component", "webhook"))
	// The outbox table's changefeed (CockroachDB) wakes the relay through the same server.
	return webhook.Listen(cfg.WebhookAddr, bundle.TLSConfig, h, map[string]http.Handler{
		webhook.Path + feed.OutboxSinkSuffix: outbox.WebhookHandler(relay, "Bearer "+token),
	})
}

// components are the Configs of the parts that c's settings configure, before run adds
// what it makes (the pool, loggers, callbacks). Each takes the settings it has a field
// for (copySettings); only those that change name, type or meaning on the way are set
// here.
type components struct {
	ingest  ingest.Config
	process process.Config
	sweeper process.SweeperConfig
	outbox  outbox.Config
	webhook webhook.Config
}

func (c Config) components(stomp stompx.Config) (components, error) {
	var p components
	idSource, err := message.ParseIDSource(c.IDSource)
	if err != nil {
		return p, fmt.Errorf("id-source: %w", err)
	}
	copySettings(&p.ingest, c, "", "MaxInflightBytes", "IDSource")
	p.ingest.Addr, p.ingest.Login, p.ingest.Passcode, p.ingest.Host = stomp.Addr, stomp.Login, stomp.Passcode, stomp.Host
	p.ingest.TLS, p.ingest.HeartBeat = stomp.TLS, stomp.HeartBeat
	p.ingest.Linger, p.ingest.MaxInflightBytes, p.ingest.IDSource = c.BatchLinger, int64(c.MaxInflightBytes), idSource

	copySettings(&p.process, c, "Process")
	p.process.BaseBackoff, p.process.MaxBackoff = c.RetryBaseDelay, c.RetryMaxDelay

	// The sweeper's batches are processing's.
	copySettings(&p.sweeper, c, "Sweep", "BatchSize")
	p.sweeper.BatchSize = c.ProcessBatchSize

	copySettings(&p.outbox, c, "Outbox")
	p.outbox.Parallel = defaults.OutboxPublishers

	copySettings(&p.webhook, c, "Webhook", "MaxBodyBytes")
	p.webhook.Sink, p.webhook.MaxBodyBytes = c.WebhookURL, webhook.MaxBodyBytes(c.MaxBodyBytes)
	return p, nil
}

// copySettings sets each field F of *dst, a component's Config, to c's field
// prefix+F, or else c's F (for prefix Outbox: Lease from OutboxLease, Retention from
// OutboxRetention before Retention), so that a setting reaches its component without a
// line of its own. A field of the same kind under a named type (ingest.AckMode) is
// converted. The fields listed in byHand are left to the caller, which sets them from
// another name, type or meaning; any other field whose namesake has another type
// panics, a bug that TestEverySettingReachesAComponent finds. A namesake of the same
// type is copied whatever it means, so a setting is named after what it means to its
// component, with the component's prefix.
func copySettings(dst any, c Config, prefix string, byHand ...string) {
	d, src := reflect.ValueOf(dst).Elem(), reflect.ValueOf(c)
	for i := range d.NumField() {
		f := d.Type().Field(i)
		if !f.IsExported() || slices.Contains(byHand, f.Name) {
			continue
		}
		v := src.FieldByName(prefix + f.Name)
		if !v.IsValid() {
			v = src.FieldByName(f.Name)
		}
		switch {
		case !v.IsValid():
		case v.Type() == f.Type:
			d.Field(i).Set(v)
		case v.Kind() == f.Type.Kind() && v.Type().ConvertibleTo(f.Type):
			d.Field(i).Set(v.Convert(f.Type))
		default:
			panic(fmt.Sprintf("inboxd: %s.%s is a %s, Config's namesake a %s: convert it by hand (byHand)", d.Type(), f.Name, f.Type, v.Type()))
		}
	}
}

// pruneConfig is what the retention pruner deletes, given the retention (feed's terms:
// zero keeps forever) and whether the database has row-level TTL. The journal and the
// replay runs that ended expire with the journal's retention on both databases: a
// row-level TTL cannot tell an ended run's items from a running one's, nor a settled
// entry from one that still needs work (its status is in journal_state, which a TTL
// expression on the journal cannot read). The quarantine's TTL is CockroachDB's.
func pruneConfig(keep feed.Retention, rowTTL bool) retention.Config {
	rcfg := retention.Config{Journal: keep.Journal, Quarantine: keep.Quarantine, Replay: keep.Journal}
	if rowTTL {
		rcfg.Quarantine = 0
	}
	return rcfg
}
