package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/lifecycle"
	"github.com/inboxd/inboxd/internal/logx"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/notifier"
)

// Publisher sends one persistent message and returns once the broker confirmed it;
// *stompx.Publisher is one.
type Publisher interface {
	Publish(ctx context.Context, destination string, body []byte, headers map[string]string) error
}

// Config tunes the relay. Zero values take the product's defaults (package defaults).
type Config struct {
	// BatchSize bounds the rows claimed per pass. Default 100.
	BatchSize int
	// Lease is how long a claimed row stays invisible to other relays. A pass stops
	// publishing at three quarters of it, so that no row is ever published by two
	// relays at once. Default 30s.
	Lease time.Duration
	// PollInterval is the safety net between passes when nothing woke the relay.
	// Default 1s.
	PollInterval time.Duration
	// PublishTimeout bounds one publish and its receipt. Default 10s.
	PublishTimeout time.Duration
	// Retention is how long sent rows are kept before deletion. Default 24h.
	Retention time.Duration
	// RetryMaxDelay caps the wait before a failed row's next attempt, which starts at 1s
	// and doubles. Default 5m.
	RetryMaxDelay time.Duration
	// CleanupInterval is how often sent rows past Retention are deleted, in batches of
	// CleanupBatch. Defaults 1m and 1000.
	CleanupInterval time.Duration
	CleanupBatch    int
	// Parallel bounds the publishes in flight; give the Publisher as many connections.
	// Default 4.
	Parallel int
	// Notifier is the process's one LISTEN connection (PostgreSQL only): through it an
	// emitting transaction's commit, in this process or another, wakes the relay at once.
	// Nil: the poll alone, as on CockroachDB, where the outbox changefeed wakes it.
	Notifier *notifier.Notifier
}

func (c Config) withDefaults() Config {
	c.BatchSize = defaults.Or(c.BatchSize, defaults.OutboxBatchSize)
	c.Parallel = defaults.Or(c.Parallel, defaults.OutboxPublishers)
	c.Lease = defaults.Or(c.Lease, defaults.OutboxLease)
	c.PollInterval = defaults.Or(c.PollInterval, defaults.OutboxPollInterval)
	c.PublishTimeout = defaults.Or(c.PublishTimeout, defaults.PublishTimeout)
	c.Retention = defaults.Or(c.Retention, defaults.OutboxRetention)
	c.RetryMaxDelay = defaults.Or(c.RetryMaxDelay, defaults.OutboxRetryMaxDelay)
	c.CleanupInterval = defaults.Or(c.CleanupInterval, defaults.OutboxCleanupInterval)
	c.CleanupBatch = defaults.Or(c.CleanupBatch, defaults.OutboxCleanupBatch)
	return c
}

// Relay publishes outbox rows. Several relays (inboxd instances) can share one outbox.
type Relay struct {
	pool *pgxpool.Pool
	pub  Publisher
	cfg  Config
	m    *metrics.Metrics
	log  *slog.Logger
	wake chan struct{}

	statsMu   sync.Mutex
	statsRead time.Time
	statsOut  logx.Outage
}

// NewRelay builds a relay. m and log may be nil.
func NewRelay(pool *pgxpool.Pool, pub Publisher, cfg Config, m *metrics.Metrics, log *slog.Logger) *Relay {
	if m == nil {
		m = metrics.New()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Relay{pool: pool, pub: pub, cfg: cfg.withDefaults(), m: m, log: log, wake: make(chan struct{}, 1),
		statsOut: logx.Outage{Log: log, What: "outbox stats", Level: slog.LevelWarn}}
}

// Wake makes the relay run a pass now (or right after the one under way).
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run relays until ctx ends, then returns nil. A pass publishing when ctx ends is cut
// short: what it published is marked sent, the rest is released for the next relay.
func (r *Relay) Run(ctx context.Context) error {
	if r.cfg.Notifier != nil {
		// Each time the notifier listens again, too: whatever committed while nobody listened.
		sub := r.cfg.Notifier.Listen(NotifyChannel, func(notifier.Notification) { r.Wake() })
		defer sub.Unlisten()
	}
	poll := time.NewTicker(r.cfg.PollInterval)
	defer poll.Stop()
	lastCleanup := time.Time{}
	// At least one try a second (the Reconnect cap), logged once per outage.
	bo := backoff.Waiter{Policy: backoff.Policy{Initial: 150 * time.Millisecond}}
	out := logx.Outage{Log: r.log, What: "outbox relay", Level: slog.LevelWarn}
	cleanupOut := logx.Outage{Log: r.log, What: "outbox retention", Level: slog.LevelWarn}
	// Set while the broker refuses: a pass that publishes nothing (the failed rows wait
	// their backoff) proves the database, not the broker, so only a publish ends it.
	brokerDown := false
	for ctx.Err() == nil {
		n, err := r.RelayOnce(ctx)
		// A pass that drained the backlog refreshes the gauges at once, so that they show
		// the outcome (an empty outbox) rather than the depth a second ago.
		r.refreshGauges(ctx, err == nil && n > 0 && n < r.cfg.BatchSize)
		if time.Since(lastCleanup) >= r.cfg.CleanupInterval {
			lastCleanup = time.Now()
			// A transient outage, logged once at WARN: the next pass deletes what this one
			// did not.
			switch _, err := r.Cleanup(ctx); {
			case err != nil && ctx.Err() == nil:
				cleanupOut.Fail("outbox retention pass failed; trying again at the next pass", err)
			case err == nil:
				cleanupOut.Recovered("outbox retention works again")
			}
		}
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			brokerDown = errors.As(err, new(*publishError))
			out.Fail("outbox relay pass failed; retrying at least every second, logged once per outage", err)
			if journal.IsLicenseThrottled(err) {
				// CockroachDB's license throttle counts open transactions: asking every
				// second only adds to them.
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(journal.ThrottledWait):
				}
			}
			if bo.Wait(ctx) != nil {
				return nil
			}
			continue
		}
		bo.Reset()
		if !brokerDown || n > 0 {
			brokerDown = false
			out.Recovered("outbox relay works again")
		}
		if n >= r.cfg.BatchSize {
			continue // more may be waiting
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-poll.C:
		}
	}
	return nil
}

// publishError is a pass's first failed publish: the broker refused or was away.
type publishError struct{ err error }

func (e *publishError) Error() string { return "publishing: " + e.err.Error() }
func (e *publishError) Unwrap() error { return e.err }

type claimed struct {
	id, destination string
	headers         map[string]string
	body            []byte
	attempts        int64
	createdAt       time.Time
	group           *string // nil: no group
	seq             int64
	bad             error // the row cannot be published as stored
}

// RelayOnce claims due rows and publishes them, each group's in emit order, stopping a
// group at its first failure and the pass at the first failed publish. It returns how
// many it published; the error is the first failure, if any.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	start := time.Now()
	rows, err := r.claim(ctx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	// Stop well before the lease ends: past it, another relay may claim these rows.
	pctx, cancel := context.WithDeadline(ctx, start.Add(r.cfg.Lease*3/4))
	defer cancel()
	tried, perrs := r.publishAll(pctx, rows)

	// One statement records every row's outcome. It survives ctx's end: marking what
	// the broker confirmed saves a republish.
	n := len(rows)
	ids, outcomes, delays, reasons := make([]string, n), make([]string, n), make([]int64, n), make([]*string, n)
	sent := 0
	var first error
	for i, row := range rows {
		ids[i] = row.id
		switch {
		case !tried[i]:
			outcomes[i] = "untried"
		case perrs[i] == nil:
			outcomes[i] = "sent"
			sent++
		default:
			// A failed row waits a backoff of its own, and the rest of its group behind
			// it (emit order); other groups go on. Cut short by the lease or by shutdown,
			// its outcome is unknown and it may go again at once.
			outcomes[i] = "failed"
			reason := message.Truncate(perrs[i].Error(), 1000)
			reasons[i] = &reason
			if row.bad != nil {
				r.log.Error("outbox row cannot be published; fix or delete it (its group waits)", "id", row.id, "error", row.bad)
			}
			if pctx.Err() == nil || row.bad != nil {
				delays[i] = r.rowRetry().Delay(int(row.attempts)).Milliseconds()
				r.m.OutboxPublishErrors.Inc()
				if first == nil && row.bad == nil {
					first = perrs[i]
				}
			}
		}
	}
	detached, undetach := lifecycle.Detach(ctx) // bounded by the shutdown budget too
	defer undetach()
	dctx, dcancel := context.WithTimeout(detached, 10*time.Second)
	defer dcancel()
	var errs []error
	if first != nil && ctx.Err() == nil {
		errs = append(errs, &publishError{err: first})
	}
	if _, err := r.pool.Exec(dctx, sqlSettle, ids, outcomes, delays, reasons); err != nil {
		errs = append(errs, fmt.Errorf("recording the outcome of %d outbox rows (%d sent will be sent again; the others wait for their lease): %w", n, sent, err))
	} else {
		r.m.OutboxPublished.Add(float64(sent))
	}
	return sent, errors.Join(errs...)
}

// publishAll publishes rows, Parallel groups at a time. Rows of one group go one after
// another in emit order (rows come sorted by seq); a group's first failure ends it, and
// a failed publish stops the pass from starting more (a broker that is down would
// otherwise cost a dial timeout per row). A row that cannot be published as stored
// fails its group only. tried[i] tells whether row i was attempted, errs[i] how it failed.
func (r *Relay) publishAll(ctx context.Context, rows []claimed) (tried []bool, errs []error) {
	tried, errs = make([]bool, len(rows)), make([]error, len(rows))
	var groups [][]int
	byGroup := map[string]int{}
	for i, row := range rows {
		if row.group == nil {
			groups = append(groups, []int{i}) // no group: free to go in parallel
			continue
		}
		if j, ok := byGroup[*row.group]; ok {
			groups[j] = append(groups[j], i)
			continue
		}
		byGroup[*row.group] = len(groups)
		groups = append(groups, []int{i})
	}
	var stop atomic.Bool
	work := make(chan []int)
	var wg sync.WaitGroup
	for range min(r.cfg.Parallel, len(groups)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for g := range work {
				for _, i := range g {
					if stop.Load() || ctx.Err() != nil {
						break
					}
					tried[i] = true // each index belongs to one group, so to one goroutine
					if rows[i].bad != nil {
						errs[i] = rows[i].bad
						break
					}
					if errs[i] = r.publish(ctx, rows[i]); errs[i] != nil {
						stop.Store(true)
						break
					}
				}
			}
		}()
	}
	for _, g := range groups {
		work <- g
	}
	close(work)
	wg.Wait()
	return tried, errs
}

// rowRetry is the wait before a failed row's next attempt: 1s doubling to
// RetryMaxDelay, no jitter.
func (r *Relay) rowRetry() backoff.Policy {
	return backoff.Policy{Initial: time.Second, Max: r.cfg.RetryMaxDelay, Jitter: -1}
}

// claim leases up to BatchSize rows: due group heads, and the rows that follow them in
// their groups, in emit order. It picks heads without a lock, then, in one short
// transaction, locks those still due by primary key (skipping any another relay holds)
// and leases them with their successors. A relay publishes a group's rows only while
// it holds the group's head, so two relays never publish parts of one group.
func (r *Relay) claim(ctx context.Context) ([]claimed, error) {
	pick, err := r.pool.Query(ctx, sqlPickHeads, r.cfg.BatchSize)
	if err != nil {
		return nil, fmt.Errorf("picking outbox group heads: %w", err)
	}
	picked, err := pgx.CollectRows(pick, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("picking outbox group heads: %w", err)
	}
	if len(picked) == 0 {
		return nil, nil
	}
	var out []claimed
	lease := func(tx pgx.Tx) error {
		var ids []string
		var groups []*string
		var seqs []int64
		var id string
		var group *string
		var seq int64
		var due bool
		lock, err := tx.Query(ctx, sqlLockHeads, picked)
		if err != nil {
			return fmt.Errorf("locking outbox group heads: %w", err)
		}
		if _, err := pgx.ForEachRow(lock, []any{&id, &group, &seq, &due}, func() error {
			if due { // else sent or leased since the pick
				ids, groups, seqs = append(ids, id), append(groups, group), append(seqs, seq)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("locking outbox group heads: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		rows, err := tx.Query(ctx, sqlLeaseClaim, ids, groups, seqs, max(0, r.cfg.BatchSize-len(ids)), r.cfg.Lease.Milliseconds())
		if err != nil {
			return fmt.Errorf("leasing outbox rows: %w", err)
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimed, error) {
			var c claimed
			var hj []byte
			if err := row.Scan(&c.id, &c.destination, &hj, &c.body, &c.attempts, &c.createdAt, &c.group, &c.seq); err != nil {
				return c, err
			}
			if err := json.Unmarshal(hj, &c.headers); err != nil {
				// Only a row written around Emit can get here; it fails its group only.
				c.bad = fmt.Errorf("outbox row %s has headers that are not an object of strings: %w", c.id, err)
			}
			return c, nil
		})
		if err != nil {
			return fmt.Errorf("leasing outbox rows: %w", err)
		}
		return nil
	}
	// On CockroachDB (SERIALIZABLE) an emit committing into a group being leased can
	// make the transaction restart (40001); it is short, so it is simply run again.
	// https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference
	for attempt := 1; ; attempt++ {
		out = nil
		err = pgx.BeginFunc(ctx, r.pool, lease)
		if err == nil || attempt == 3 || !isRetryable(err) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("claiming outbox rows: %w", err)
	}
	// UPDATE … RETURNING keeps no order; seq is the emit order (ties: rows written
	// before migration 0009, by time).
	slices.SortFunc(out, func(a, b claimed) int {
		if c := cmp.Compare(a.seq, b.seq); c != 0 {
			return c
		}
		return a.createdAt.Compare(b.createdAt)
	})
	return out, nil
}

// isRetryable tells a transaction conflict, retried as a whole (the codes crdb.ExecuteInTx
// retries).
func isRetryable(err error) bool {
	var e interface{ SQLState() string }
	return errors.As(err, &e) && (e.SQLState() == "40001" || e.SQLState() == "CR000")
}

func (r *Relay) publish(ctx context.Context, row claimed) error {
	headers := make(map[string]string, len(row.headers)+1)
	for k, v := range row.headers {
		headers[k] = v
	}
	headers[HeaderOutboxID] = row.id
	pctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()
	if err := r.pub.Publish(pctx, row.destination, row.body, headers); err != nil {
		return fmt.Errorf("publishing outbox row %s to %s (attempt %d): %w", row.id, row.destination, row.attempts, err)
	}
	return nil
}

// Cleanup deletes sent rows older than Retention, in bounded batches, and returns how
// many it deleted. It stops after 10 batches; the next round continues.
func (r *Relay) Cleanup(ctx context.Context) (int64, error) {
	var total int64
	for range 10 {
		tag, err := r.pool.Exec(ctx, sqlDeleteSent, r.cfg.Retention.Milliseconds(), r.cfg.CleanupBatch)
		if err != nil {
			return total, fmt.Errorf("deleting sent outbox rows: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(r.cfg.CleanupBatch) {
			break
		}
	}
	r.m.OutboxDeleted.Add(float64(total))
	return total, nil
}

// refreshGauges updates the depth and age gauges, at most once per poll interval
// unless forced.
func (r *Relay) refreshGauges(ctx context.Context, force bool) {
	r.statsMu.Lock()
	defer r.statsMu.Unlock()
	if !force && time.Since(r.statsRead) < r.cfg.PollInterval {
		return
	}
	r.statsRead = time.Now()
	st, err := ReadStats(ctx, r.pool)
	if err != nil {
		if ctx.Err() == nil {
			r.statsOut.Fail("reading outbox stats failed; the gauges keep their last values", err)
		}
		return
	}
	r.statsOut.Recovered("reading outbox stats works again")
	r.m.OutboxUnsent.Set(float64(st.Unsent))
	r.m.OutboxOldestAge.Set(st.OldestUnsentAge().Seconds())
}
