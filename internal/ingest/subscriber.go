package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/logx"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/tracing"
)

// Subscriber consumes the configured destinations into the journal. Build it with New
// and start it with Run.
type Subscriber struct {
	cfg     Config
	db      database.DB
	ackMode stomp.AckMode
	ready   atomic.Int32
	hooks   hooks
	// batchSeq numbers batches for the logs, so that one batch's lines can be found.
	batchSeq atomic.Uint64
	dests    map[string]*destState
	// warn rate-limits the quarantine warning: one line per destination per minute.
	warn *logx.Limiter
	// tracer makes one span per batch written, linked to its messages' traces.
	tracer trace.Tracer
}

// destState is what the subscriber knows of one destination, for the byte bound and
// for Health. Its fields are atomics: the session's goroutines write them and Health
// reads them.
type destState struct {
	held, heldMsgs atomic.Int64 // bodies taken from the subscription and not yet acked
	peakHeld       atomic.Int64 // the most bytes held at once, for tests
	subscribed     atomic.Bool
	dialectNoted   atomic.Bool  // noteDialect has run
	since          atomic.Int64 // unix nanos: subscribed (while subscribed) or lost (while not)
	lastCommit     atomic.Int64 // unix nanos of the last batch committed and acked
	failures       atomic.Int64 // failed sessions since the last commit
	failingSince   atomic.Int64 // unix nanos of the first failed journal write since the last commit; 0 if none
	gauge          interface{ Set(float64) }
}

func (d *destState) hold(bytes int64) {
	h := d.held.Add(bytes)
	d.heldMsgs.Add(1)
	if h > d.peakHeld.Load() {
		d.peakHeld.Store(h) // racy max, good enough for a test bound
	}
	if d.gauge != nil {
		d.gauge.Set(float64(h))
	}
}

func (d *destState) release(bytes int64, msgs int) {
	h := d.held.Add(-bytes)
	d.heldMsgs.Add(-int64(msgs))
	if d.gauge != nil {
		d.gauge.Set(float64(h))
	}
}

// errOverBudget ends a session that holds MaxInflightBytes: it stopped taking
// messages, committed and acked what it took, and is renewed with a smaller prefetch.
type errOverBudget struct{ largest int64 }

func (e *errOverBudget) Error() string {
	return fmt.Sprintf("in-flight bytes bound reached (largest body %d bytes)", e.largest)
}

// errRenew ends a session with a reduced prefetch after reducedPrefetchFor, so that it
// is renewed at the configured prefetch.
var errRenew = errors.New("renewing the subscription at the configured prefetch")

// hooks let tests stop the pipeline at precise points (for example to kill the process
// between commit and ack). They are nil in production.
type hooks struct {
	// beforeSubscribe runs once connected, right before SUBSCRIBE.
	beforeSubscribe func(ctx context.Context, destination string)
	beforeIngest    func(ctx context.Context, destination string, messages int)
	afterIngest     func(ctx context.Context, destination string, res journal.Result)
	// skipped runs when a batch is not written because an earlier write failed.
	skipped func(destination string, b *batch)
	// unsubscribe, when set, is called instead of sub.Unsubscribe at a session's end.
	unsubscribe func(sub *stomp.Subscription) error
}

// CommitError is the error of a session that ended because journal.Ingest failed.
type CommitError struct{ Err error }

func (e *CommitError) Error() string { return "writing batch to the journal: " + e.Err.Error() }
func (e *CommitError) Unwrap() error { return e.Err }

// New validates cfg and returns a Subscriber writing into db (a pool, usually).
func New(cfg Config, db database.DB) (*Subscriber, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ack, _ := cfg.AckMode.stomp()
	s := &Subscriber{cfg: cfg, db: db, ackMode: ack, dests: make(map[string]*destState, len(cfg.Destinations)),
		warn: logx.NewLimiter(time.Minute), tracer: tracing.Tracer(cfg.TracerProvider)}
	now := time.Now().UnixNano()
	for _, d := range cfg.Destinations {
		st := &destState{}
		st.since.Store(now)
		st.lastCommit.Store(now)
		if m := cfg.Metrics; m != nil {
			st.gauge = m.InflightBytes.WithLabelValues(d)
		}
		s.dests[d] = st
	}
	return s, nil
}

// Health says why ingest is stuck, or returns nil. A destination is stuck when it has
// had no subscription for longer than stallAfter (the broker or the database is away),
// when its journal writes have kept failing for that long, or when it holds messages
// and has committed nothing for that long.
func (s *Subscriber) Health(stallAfter time.Duration) error {
	now := time.Now()
	var errs []error
	for _, dest := range s.cfg.Destinations {
		st := s.dests[dest]
		since := now.Sub(time.Unix(0, st.since.Load()))
		if !st.subscribed.Load() && since > stallAfter {
			errs = append(errs, fmt.Errorf("%s: no subscription for %s (%d failed attempts)", dest, since.Round(time.Second), st.failures.Load()))
			continue
		}
		if f := st.failingSince.Load(); f != 0 && now.Sub(time.Unix(0, f)) > stallAfter {
			errs = append(errs, fmt.Errorf("%s: journal writes failing for %s (%d failed attempts)", dest, now.Sub(time.Unix(0, f)).Round(time.Second), st.failures.Load()))
			continue
		}
		idle := now.Sub(time.Unix(0, max(st.lastCommit.Load(), st.since.Load())))
		if st.heldMsgs.Load() > 0 && idle > stallAfter {
			errs = append(errs, fmt.Errorf("%s: %d messages waiting, nothing committed for %s", dest, st.heldMsgs.Load(), idle.Round(time.Second)))
		}
	}
	return errors.Join(errs...)
}

// Ready reports whether every destination has a live subscription right now.
func (s *Subscriber) Ready() bool { return int(s.ready.Load()) == len(s.cfg.Destinations) }

// Run consumes until ctx is canceled, reconnecting as often as needed, and then returns
// nil once every destination has stopped reading, finished its batch in flight (commit
// then ack, or neither), unsubscribed and disconnected.
func (s *Subscriber) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, dest := range s.cfg.Destinations {
		wg.Go(func() { s.consume(ctx, dest) })
	}
	wg.Wait()
	return nil
}

// consume runs sessions for one destination until ctx is canceled.
func (s *Subscriber) consume(ctx context.Context, dest string) {
	log := s.cfg.Logger.With("destination", dest)
	st := s.dests[dest]
	bo := backoff.Waiter{Policy: s.cfg.Backoff}
	contracted := backoff.Waiter{Policy: journal.ContractedBackoff}
	standby := false
	if stompx.IsTopic(dest) && s.cfg.NonDurableTopics {
		log.Warn("non-durable topic subscription (opted in with non-durable-topics): " +
			"events published while inboxd is disconnected are lost")
	}
	brokerOut := &logx.Outage{Log: log, What: "broker", Level: slog.LevelWarn}
	dbOut := &logx.Outage{Log: log, What: "database", Level: slog.LevelWarn}
	prefetch := s.cfg.Prefetch
	for {
		started := time.Now()
		progressed, err := s.runSession(ctx, dest, prefetch, log,
			func() { brokerOut.Recovered("subscribed again") },
			func() { dbOut.Recovered("journal writes succeed again") })
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("ingest stopped; the last session ended with an error", "err", err)
			}
			return
		}
		if progressed || time.Since(started) > time.Minute {
			bo.Reset()
			contracted.Reset()
		}
		if ob, ok := errors.AsType[*errOverBudget](err); ok {
			// At most MaxInflightBytes/largest messages prefetched: large bodies cannot
			// exhaust memory, and small ones get the full prefetch back after a while.
			next := int(min(int64(s.cfg.Prefetch), max(1, s.cfg.MaxInflightBytes/max(ob.largest, 1))))
			log.Info("large messages: holding too many bytes; subscribing again with a smaller prefetch",
				"max_inflight_bytes", s.cfg.MaxInflightBytes, "largest_body", ob.largest, "prefetch", next,
				"for", reducedPrefetchFor)
			prefetch = next
			continue
		}
		if errors.Is(err, errRenew) {
			log.Info("subscribing again at the configured prefetch", "prefetch", s.cfg.Prefetch)
			prefetch = s.cfg.Prefetch
			continue
		}
		st.failures.Add(1)
		if commitErr, ok := errors.AsType[*CommitError](err); ok && s.cfg.Contraction != nil && s.cfg.Contraction.Report(commitErr.Err) {
			// A newer release contracted the schema under this one: the batch is not
			// acked (the broker redelivers it, to an upgraded instance if one consumes),
			// the instance logged it once, and writes are tried seldom until it is
			// replaced, not at every redelivery.
			st.failingSince.CompareAndSwap(0, time.Now().UnixNano())
			s.reconnected("db")
			if contracted.Wait(ctx) != nil {
				return
			}
			continue
		}
		if commitErr, ok := errors.AsType[*CommitError](err); ok {
			st.failingSince.CompareAndSwap(0, time.Now().UnixNano())
			dbOut.Fail("journal write failed: dropped the broker connection without acking the batch, "+
				"so the broker will redeliver it; waiting for the database"+oncePerOutage, commitErr.Err)
			s.reconnected("db")
			if journal.IsLicenseThrottled(commitErr.Err) && !sleepCtx(ctx, journal.ThrottledWait) {
				return // a probe a second would only add to the transactions the throttle counts
			}
			if !s.waitDB(ctx, &bo, log) {
				return
			}
			continue
		}
		if errors.Is(err, stompx.ErrClientIDInUse) {
			// Standby: another connection (another instance with the same client id, or
			// this one's previous connection the broker has not dropped yet) holds the
			// durable subscription. Only one connection can consume it; take over when
			// it lets go.
			if !standby {
				log.Warn("standby: another connection holds this destination's client id, so it is consuming the "+
					"durable subscription; retrying until it lets go", "err", err)
			}
			standby = true
		} else {
			standby = false
			brokerOut.Fail("broker session ended; reconnecting"+oncePerOutage, err)
			s.reconnected("stomp")
		}
		if bo.Wait(ctx) != nil {
			return
		}
	}
}

// sleepCtx waits d, or less when ctx ends (then it reports false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// oncePerOutage ends the line that opens an outage: the tries that follow go to debug.
const oncePerOutage = "; retrying at least every second, logged once per outage"

// waitDB backs off until the database answers, so that a database outage does not
// turn into a loop of broker redeliveries. It returns false when ctx ends first.
// Its failures belong to the outage the caller already logged.
func (s *Subscriber) waitDB(ctx context.Context, bo *backoff.Waiter, log *slog.Logger) bool {
	for {
		if bo.Wait(ctx) != nil {
			return false
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		var one int
		err := s.db.QueryRow(pctx, "SELECT 1").Scan(&one)
		cancel()
		if err == nil {
			log.Debug("database answers; resubscribing")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Debug("database still unavailable", "err", err, "attempt", bo.Attempt())
	}
}

func (s *Subscriber) reconnected(component string) {
	if m := s.cfg.Metrics; m != nil {
		m.Reconnects.WithLabelValues(component).Inc()
	}
}
