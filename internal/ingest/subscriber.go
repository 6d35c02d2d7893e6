package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/logx"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/tracing"
)

// Subscriber consumes the configured destinations into the journal. Build it with New
// and start it with Run.
type Subscriber struct {
	cfg   Config
	db    database.DB
	ack   stomp.AckMode
	ready atomic.Int32
	hooks hooks
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
}

// overlaps reports whether two batches share an event id or an aggregate.
func (b *batch) overlaps(o *batch) bool {
	small, large := b.keys, o.keys
	if len(small) > len(large) {
		small, large = large, small
	}
	for k := range small {
		if _, ok := large[k]; ok {
			return true
		}
	}
	return false
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// errSkipped stands for a batch not written because an earlier one failed.
var errSkipped = errors.New("batch skipped after an earlier batch failed")

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
	s := &Subscriber{cfg: cfg, db: db, ack: ack, dests: make(map[string]*destState, len(cfg.Destinations)),
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
		progressed, err := s.session(ctx, dest, prefetch, log,
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

// batch is what one Ingest call writes and the messages it acknowledges afterwards.
type batch struct {
	id uint64
	// keys are the event ids and aggregate ids of the batch's entries.
	keys        map[string]struct{}
	msgs        []*stomp.Message
	bytes       int64 // of the bodies, held until acked
	rows        int   // estimated bytes of the batch's rows in the ingest statement
	jb          journal.Batch
	quarantined map[message.Reason]int
}

// session is one connection and subscription. It returns when ctx is canceled (after
// a clean shutdown, with a nil error unless cleanup failed) or when the connection or a
// commit fails. progressed reports whether at least one batch was committed and acked.
//
// onSubscribed runs once subscribed, onCommitted after each batch committed and acked.
func (s *Subscriber) session(ctx context.Context, dest string, prefetch int, log *slog.Logger,
	onSubscribed, onCommitted func()) (progressed bool, err error) {
	bcfg := s.cfg.broker()
	subOpts := []func(*frame.Frame) error{stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(prefetch))}
	durable, isDurable := s.cfg.durable(dest)
	if isDurable {
		bcfg.ClientID = durable.ClientID
		subOpts = append(subOpts, stomp.SubscribeOpt.Header(stompx.HeaderSubscriptionName, durable.Name))
	}
	conn, err := stompx.DialConn(ctx, bcfg)
	if err != nil {
		return false, err
	}
	if isDurable {
		// Recorded before SUBSCRIBE creates it, so that no subscription the broker keeps
		// messages for is unknown to "inboxd subscriptions list".
		if err := journal.RecordSubscription(ctx, s.db, durable.ClientID, durable.Name, dest); err != nil {
			conn.Abort()
			return false, err
		}
	}
	if h := s.hooks.beforeSubscribe; h != nil {
		h(ctx, dest)
	}
	sub, err := conn.Subscribe(dest, s.ack, subOpts...)
	if err != nil {
		conn.Abort()
		return false, fmt.Errorf("subscribing to %s: %w", dest, err)
	}
	st := s.dests[dest]
	// Whatever was taken and not acked is the broker's again.
	defer func() { st.release(st.held.Load(), int(st.heldMsgs.Load())) }()

	// Reader: drains sub.C promptly until go-stomp closes it, forwarding to the batcher
	// until the first error or until told to stop; afterwards it discards (what it
	// discards is unacked, so the broker redelivers it).
	msgs := make(chan *stomp.Message, s.cfg.Prefetch+16)
	stopReading := make(chan struct{})
	readerDone := make(chan struct{})
	var readErr error // written before msgs is closed
	go func() {
		defer close(readerDone)
		forwarding := true
		stop := func(err error) {
			if forwarding {
				readErr = err
				forwarding = false
				close(msgs)
			}
		}
		var largest int64
		for m := range sub.C {
			if !forwarding {
				continue
			}
			if m.Err != nil {
				stop(fmt.Errorf("subscription to %s: %w", dest, m.Err))
				continue
			}
			n := int64(len(m.Body))
			largest = max(largest, n)
			if h := st.held.Load(); h > 0 && h+n > s.cfg.MaxInflightBytes {
				// Not taken, so not acked: the broker gives it to the next session.
				stop(&errOverBudget{largest: largest})
				continue
			}
			st.hold(n)
			select {
			case msgs <- m:
			case <-stopReading:
				st.release(n, 1)
				stop(errors.New("stopped reading"))
			}
		}
		stop(fmt.Errorf("subscription to %s closed", dest))
	}()

	// go-stomp does not wait for SUBSCRIBE to take effect. The broker handles one
	// connection's frames in order, so a receipt for a later frame proves the
	// subscription exists: only then is this destination ready (for a non-durable topic
	// that is when messages stop being lost). Placed after the reader starts, since
	// messages may arrive before the receipt.
	if err := subscribed(conn); err != nil {
		conn.Abort()
		<-readerDone
		return false, fmt.Errorf("subscribing to %s: %w", dest, err)
	}
	s.ready.Add(1)
	st.since.Store(time.Now().UnixNano())
	st.subscribed.Store(true)
	defer func() {
		s.ready.Add(-1)
		st.subscribed.Store(false)
		st.since.Store(time.Now().UnixNano())
	}()
	onSubscribed()
	if isDurable {
		log = log.With("client_id", durable.ClientID, "subscription", durable.Name)
	}
	log.Info("subscribed", "ack", string(s.cfg.AckMode), "prefetch", prefetch, "batch", s.cfg.BatchSize, "durable", isDurable)

	// Committer: up to CommitsInFlight batches are written at once, but acked strictly in
	// dispatch order, and nothing is acked after the first failure. So a cumulative ack
	// only ever covers committed batches, and a batch committed after an earlier one
	// failed stays unacked: the broker redelivers it and the journal collapses it.
	batches := make(chan *batch)
	failed := make(chan struct{})
	committerDone := make(chan struct{})
	var commitErr error // written before failed is closed
	var committed atomic.Bool
	go func() {
		defer close(committerDone)
		type flight struct {
			b       *batch
			done    chan error
			written chan struct{} // closed when the write has returned
		}
		order := make(chan *flight, s.cfg.CommitsInFlight-1) // plus the one the acker waits on
		ackerDone := make(chan struct{})
		go func() {
			defer close(ackerDone)
			for f := range order {
				err := <-f.done
				if commitErr != nil {
					continue // wait out the writes in flight; ack none of them
				}
				if err == nil {
					err = s.ackBatch(conn, dest, f.b)
				}
				if err != nil {
					commitErr = err
					close(failed)
					continue
				}
				st.release(f.b.bytes, len(f.b.msgs))
				st.lastCommit.Store(time.Now().UnixNano())
				st.failures.Store(0)
				st.failingSince.Store(0)
				if m := s.cfg.Metrics; m != nil {
					m.MarkIngestCommit()
				}
				onCommitted()
				committed.Store(true)
			}
		}()
		var running []*flight // writes that may still be under way, oldest first
		// writeFailed is closed by the first write that fails, before its written: unlike
		// failed, which the acker closes only once it has drained every earlier batch.
		writeFailed := make(chan struct{})
		var failOnce sync.Once
		// mayWrite is the ordering rule, in one place. A batch is written only
		//  1. once every write under way that shares an event id or an aggregate with it
		//     has returned: that keeps one aggregate's sequence numbers, commit order and
		//     so processing order in broker order, and lets the journal judge a repeated
		//     id against the committed first one; and
		//  2. if no write of this session has failed. The failed batch's events come back
		//     redelivered, later, so a batch of the same aggregate committed now would
		//     get the earlier sequence numbers (issue 18). Rule 2 asks the writes
		//     themselves (writeFailed), because the acker's failed can lag behind them.
		// A batch that may not be written is skipped; the acker acks nothing after a
		// failure, so the broker redelivers it in order behind the failed one.
		mayWrite := func(b *batch) bool {
			running = slices.DeleteFunc(running, func(r *flight) bool { return isClosed(r.written) })
			for _, r := range running {
				if r.b.overlaps(b) {
					<-r.written
				}
			}
			return !isClosed(failed) && !isClosed(writeFailed)
		}
		for b := range batches {
			if isClosed(failed) {
				continue // never write (let alone ack) after a failure
			}
			f := &flight{b: b, done: make(chan error, 1), written: make(chan struct{})}
			order <- f // blocks while CommitsInFlight writes are under way
			if !mayWrite(b) {
				if h := s.hooks.skipped; h != nil {
					h(dest, b)
				}
				f.done <- errSkipped
				close(f.written)
				continue
			}
			running = append(running, f)
			go func() {
				defer close(f.written)
				err := s.write(ctx, dest, b, log)
				if err != nil {
					failOnce.Do(func() { close(writeFailed) })
				}
				f.done <- err
			}()
		}
		close(order)
		<-ackerDone
	}()

	// Abandon: drop the connection without acking anything more.
	abandon := func(cause error) (bool, error) {
		close(stopReading)
		conn.Abort()
		close(batches)
		<-committerDone
		<-readerDone
		if commitErr != nil {
			return committed.Load(), commitErr
		}
		return committed.Load(), cause
	}

	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	var renew <-chan time.Time
	if prefetch < s.cfg.Prefetch {
		t := time.NewTimer(reducedPrefetchFor)
		defer t.Stop()
		renew = t.C
	}
	var cur *batch
	ready := false
	for {
		// A batch is full at BatchSize messages, or once one more message might not fit
		// the same statement (journal.Room): CockroachDB refuses a statement over 16 MiB.
		full := cur != nil && (len(cur.msgs) >= s.cfg.BatchSize || !journal.Room(cur.rows, s.cfg.MaxBodyBytes, s.cfg.MaxStatementBytes))
		var out chan<- *batch
		if cur != nil && (ready || full) {
			out = batches
		}
		var in <-chan *stomp.Message
		if !full {
			in = msgs
		}
		var lingerC <-chan time.Time
		if cur != nil && !ready {
			lingerC = linger.C
		}
		select {
		case <-ctx.Done():
			return s.shutdown(conn, sub, cur, batches, failed, stopReading, committerDone, readerDone, &commitErr, log)
		case <-failed:
			return abandon(nil)
		case <-renew:
			p, err := s.shutdown(conn, sub, cur, batches, failed, stopReading, committerDone, readerDone, &commitErr, log)
			return p, cmp.Or(err, errRenew)
		case m, ok := <-in:
			if !ok {
				if _, over := errors.AsType[*errOverBudget](readErr); over {
					// Commit and ack what was taken, then let the broker have the rest back.
					p, err := s.shutdown(conn, sub, cur, batches, failed, stopReading, committerDone, readerDone, &commitErr, log)
					return p, cmp.Or(err, readErr)
				}
				return abandon(readErr)
			}
			if cur == nil {
				cur = &batch{id: s.batchSeq.Add(1), jb: journal.Batch{MaxStatementBytes: s.cfg.MaxStatementBytes}}
				ready = false
				linger.Reset(s.cfg.Linger)
			}
			s.add(cur, dest, m)
		case <-lingerC:
			ready = true
		case out <- cur:
			cur = nil
			linger.Stop()
		}
	}
}

// subscribed waits until the broker has processed every frame sent so far, the SUBSCRIBE
// included: an empty transaction aborted with a receipt (bounded by the receipt timeout).
func subscribed(conn *stompx.Conn) error {
	tx, err := conn.BeginWithError()
	if err != nil {
		return err
	}
	return tx.AbortWithReceipt()
}

// shutdown ends a session on request: stop reading, commit and ack what was already
// collected, then unsubscribe and disconnect (whose receipt proves the acks arrived).
func (s *Subscriber) shutdown(conn *stompx.Conn, sub *stomp.Subscription, cur *batch, batches chan *batch,
	failed, stopReading, committerDone, readerDone chan struct{}, commitErr *error, log *slog.Logger) (bool, error) {
	close(stopReading)
	if cur != nil {
		select {
		case batches <- cur:
		case <-failed:
		}
	}
	close(batches)
	<-committerDone
	if *commitErr != nil {
		conn.Abort()
		<-readerDone
		return true, *commitErr
	}
	var errs []error
	if err := sub.Unsubscribe(); err != nil && !errors.Is(err, stomp.ErrCompletedSubscription) {
		errs = append(errs, fmt.Errorf("unsubscribing: %w", err))
	}
	if err := conn.Close(); err != nil {
		errs = append(errs, err)
	}
	<-readerDone
	log.Info("unsubscribed and disconnected")
	return true, errors.Join(errs...)
}

// add decodes m into the batch: a journal entry, or a quarantine row with the raw body.
func (s *Subscriber) add(b *batch, dest string, m *stomp.Message) {
	b.msgs = append(b.msgs, m)
	b.bytes += int64(len(m.Body))
	if mt := s.cfg.Metrics; mt != nil {
		mt.Received.WithLabelValues(dest).Inc()
	}
	ev, err := message.Decode(m.Body, m.Header.Get, message.Options{
		MaxBodyBytes: s.cfg.MaxBodyBytes, DefaultEventType: s.cfg.DefaultEventType, IDSource: s.cfg.IDSource,
		Headers: func(yield func(string, string) bool) { // a binary-mode CloudEvent's extension attributes
			for i := range m.Header.Len() {
				if k, v := m.Header.GetAt(i); !yield(k, v) {
					return
				}
			}
		}})
	if err == nil {
		e := journal.Entry{Event: ev, Destination: dest,
			MessageID: m.Header.Get("message-id"), Headers: func() map[string]string { return headerMap(m) },
			TraceContext: tracing.Extract(m.Header.Get)}
		b.jb.Entries = append(b.jb.Entries, e)
		b.rows += journal.EntryBytes(e)
		if s.cfg.CommitsInFlight > 1 {
			if b.keys == nil {
				b.keys = make(map[string]struct{}, 2*s.cfg.BatchSize)
			}
			b.keys["e:"+ev.ID] = struct{}{}
			b.keys["a:"+ev.AggregateID] = struct{}{}
		}
		return
	}
	inv, ok := errors.AsType[*message.Invalid](err)
	if !ok {
		inv = &message.Invalid{Reason: message.ReasonNotJSON, Detail: err.Error()}
	}
	headers := headerMap(m)
	bad := journal.Bad{
		Reason:      inv.Reason,
		Detail:      inv.Detail,
		Destination: dest,
		MessageID:   m.Header.Get("message-id"),
		Headers:     headers,
		Body:        m.Body,
	}
	b.jb.Bad = append(b.jb.Bad, bad)
	b.rows += journal.BadBytes(bad)
	if b.quarantined == nil {
		b.quarantined = map[message.Reason]int{}
	}
	b.quarantined[inv.Reason]++
}

// headerMap is m's STOMP headers, for quarantine.
func headerMap(m *stomp.Message) map[string]string {
	headers := make(map[string]string, m.Header.Len())
	for i := range m.Header.Len() {
		k, v := m.Header.GetAt(i)
		if _, dup := headers[k]; !dup { // STOMP: the first occurrence of a repeated header wins
			headers[k] = v
		}
	}
	return headers
}

// write stores the batch with one Ingest call. It runs detached from ctx, so that a
// shutdown lets the batch in flight finish.
func (s *Subscriber) write(ctx context.Context, dest string, b *batch, log *slog.Logger) error {
	if h := s.hooks.beforeIngest; h != nil {
		h(ctx, dest, len(b.msgs))
	}
	// Detached from ctx: a shutdown lets the batch in flight finish (commit then ack).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommitTimeout)
	cctx, span := s.batchSpan(cctx, dest, b)
	start := time.Now()
	res, err := journal.Ingest(cctx, s.db, b.jb)
	cancel()
	endBatchSpan(span, res, err)
	if err != nil {
		return &CommitError{Err: err}
	}
	if res.Inserted > 0 && s.cfg.OnCommit != nil {
		s.cfg.OnCommit(res.Inserted)
	}
	if m := s.cfg.Metrics; m != nil {
		m.CommitSeconds.Observe(time.Since(start).Seconds())
		m.BatchSize.Observe(float64(len(b.msgs)))
		m.Committed.WithLabelValues(dest).Add(float64(res.Inserted))
		m.Duplicates.WithLabelValues(dest).Add(float64(res.Duplicates))
		for reason, n := range b.quarantined {
			m.Quarantined.WithLabelValues(string(reason)).Add(float64(n))
		}
		if res.Conflicts > 0 {
			m.Quarantined.WithLabelValues(string(message.ReasonIDConflict)).Add(float64(res.Conflicts))
		}
		if res.Refused > 0 {
			m.Quarantined.WithLabelValues(string(message.ReasonDBRefused)).Add(float64(res.Refused))
		}
	}
	log = log.With("batch_id", b.id)
	log.Debug("batch committed", "messages", len(b.msgs), "inserted", res.Inserted, "duplicates", res.Duplicates,
		"conflicts", res.Conflicts, "quarantined", res.Quarantined, "commit_ms", time.Since(start).Milliseconds())
	// One line per batch with counts, not one per message (a flood of bad messages
	// must not become a flood of log lines), and at most one a minute per destination.
	// Reasons, ids and bodies are in the quarantine table.
	if n := len(b.jb.Bad) + res.Conflicts + res.Refused; n > 0 {
		if ok, dropped := s.warn.Allow(dest); ok {
			byReason := make(map[string]int, len(b.quarantined)+2)
			for reason, k := range b.quarantined {
				byReason[string(reason)] += k
			}
			if res.Conflicts > 0 {
				byReason[string(message.ReasonIDConflict)] += res.Conflicts
			}
			if res.Refused > 0 {
				byReason[string(message.ReasonDBRefused)] += res.Refused
			}
			log.Warn("messages quarantined", "messages", len(b.msgs), "quarantined", n, "by_reason", byReason,
				"batches_not_logged", dropped)
		}
	}
	if h := s.hooks.afterIngest; h != nil {
		h(ctx, dest, res)
	}
	return nil
}

// ackBatch acknowledges a committed batch: one cumulative ACK for its last message, or
// one ACK per message.
func (s *Subscriber) ackBatch(conn *stompx.Conn, dest string, b *batch) error {
	var err error
	if s.ack == stomp.AckClient {
		// Cumulative: covers every earlier message of this subscription, all of which
		// belong to this batch or to batches already committed.
		err = conn.Ack(b.msgs[len(b.msgs)-1])
	} else {
		for _, m := range b.msgs {
			if err = conn.Ack(m); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("acking committed batch of %d (the broker will redeliver it as duplicates): %w", len(b.msgs), err)
	}
	if m := s.cfg.Metrics; m != nil {
		m.Acked.WithLabelValues(dest).Add(float64(len(b.msgs)))
	}
	return nil
}
