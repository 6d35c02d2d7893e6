package ingest

import (
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

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
)

// Subscriber consumes the configured destinations into the journal. Build it with New
// and start it with Run.
type Subscriber struct {
	cfg   Config
	db    journal.DB
	ack   stomp.AckMode
	ready atomic.Int32
	hooks hooks
	// batchSeq numbers batches for the logs, so that one batch's lines can be found.
	batchSeq atomic.Uint64
}

// hooks let tests stop the pipeline at precise points (for example to kill the process
// between commit and ack). They are nil in production.
type hooks struct {
	beforeIngest func(ctx context.Context, destination string, messages int)
	afterIngest  func(ctx context.Context, destination string, res journal.Result)
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
func New(cfg Config, db journal.DB) (*Subscriber, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ack, _ := cfg.AckMode.stomp()
	return &Subscriber{cfg: cfg, db: db, ack: ack}, nil
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
	bo := s.cfg.Backoff
	for {
		started := time.Now()
		progressed, err := s.session(ctx, dest, log)
		if ctx.Err() != nil {
			if err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("ingest stopped; the last session ended with an error", "err", err)
			}
			return
		}
		if progressed || time.Since(started) > time.Minute {
			bo.Reset()
		}
		if commitErr, ok := errors.AsType[*CommitError](err); ok {
			log.Error("journal write failed: dropped the broker connection without acking the batch, "+
				"so the broker will redeliver it; waiting for the database", "err", commitErr.Err)
			s.reconnected("db")
			if !s.waitDB(ctx, &bo, log) {
				return
			}
			continue
		}
		delay := bo.Next()
		log.Warn("broker session ended; reconnecting", "err", err, "in", delay.Round(time.Millisecond))
		s.reconnected("stomp")
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// waitDB backs off until the database answers, so that a database outage does not
// turn into a loop of broker redeliveries. It returns false when ctx ends first.
func (s *Subscriber) waitDB(ctx context.Context, bo *stompx.Backoff, log *slog.Logger) bool {
	for {
		if bo.Wait(ctx) != nil {
			return false
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var one int
		err := s.db.QueryRow(pctx, "SELECT 1").Scan(&one)
		cancel()
		if err == nil {
			log.Info("database reachable again; resubscribing")
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		log.Warn("database still unavailable", "err", err, "attempt", bo.Attempt())
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
	jb          journal.Batch
	quarantined map[message.Reason]int
}

// session is one connection and subscription. It returns when ctx is canceled (after
// a clean shutdown, with a nil error unless cleanup failed) or when the connection or a
// commit fails. progressed reports whether at least one batch was committed and acked.
func (s *Subscriber) session(ctx context.Context, dest string, log *slog.Logger) (progressed bool, err error) {
	conn, err := stompx.DialConn(ctx, s.cfg.broker())
	if err != nil {
		return false, err
	}
	sub, err := conn.Subscribe(dest, s.ack,
		stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(s.cfg.Prefetch)))
	if err != nil {
		conn.Abort()
		return false, fmt.Errorf("subscribing to %s: %w", dest, err)
	}
	s.ready.Add(1)
	defer s.ready.Add(-1)
	log.Info("subscribed", "ack", string(s.cfg.AckMode), "prefetch", s.cfg.Prefetch, "batch", s.cfg.BatchSize)

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
		for m := range sub.C {
			if !forwarding {
				continue
			}
			if m.Err != nil {
				stop(fmt.Errorf("subscription to %s: %w", dest, m.Err))
				continue
			}
			select {
			case msgs <- m:
			case <-stopReading:
				stop(errors.New("stopped reading"))
			}
		}
		stop(fmt.Errorf("subscription to %s closed", dest))
	}()

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
				committed.Store(true)
			}
		}()
		var running []*flight // writes that may still be under way, oldest first
		for b := range batches {
			select {
			case <-failed:
				continue // never write (let alone ack) after a failure
			default:
			}
			f := &flight{b: b, done: make(chan error, 1), written: make(chan struct{})}
			order <- f // blocks while CommitsInFlight writes are under way
			// A batch sharing an event id or an aggregate with a write under way waits
			// for it: that keeps sequence numbers, commit order and so processing order
			// of one aggregate in broker order, and lets the journal judge a repeated id
			// against the committed first one.
			running = slices.DeleteFunc(running, func(r *flight) bool { return isClosed(r.written) })
			for _, r := range running {
				if r.b.overlaps(b) {
					<-r.written
				}
			}
			select {
			case <-failed: // failed while we waited: the acker skips it
				f.done <- errSkipped
				close(f.written)
			default:
				running = append(running, f)
				go func() {
					defer close(f.written)
					f.done <- s.write(ctx, dest, b, log)
				}()
			}
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
	var cur *batch
	ready := false
	for {
		var out chan<- *batch
		if cur != nil && (ready || len(cur.msgs) >= s.cfg.BatchSize) {
			out = batches
		}
		var in <-chan *stomp.Message
		if cur == nil || len(cur.msgs) < s.cfg.BatchSize {
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
		case m, ok := <-in:
			if !ok {
				return abandon(readErr)
			}
			if cur == nil {
				cur = &batch{id: s.batchSeq.Add(1)}
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
	if mt := s.cfg.Metrics; mt != nil {
		mt.Received.WithLabelValues(dest).Inc()
	}
	ev, err := message.Decode(m.Body, m.Header.Get, message.Options{
		MaxBodyBytes: s.cfg.MaxBodyBytes, DefaultEventType: s.cfg.DefaultEventType})
	if err == nil {
		b.jb.Entries = append(b.jb.Entries, journal.Entry{Event: ev, Destination: dest})
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
	headers := make(map[string]string, m.Header.Len())
	for i := range m.Header.Len() {
		k, v := m.Header.GetAt(i)
		if _, dup := headers[k]; !dup { // STOMP: the first occurrence of a repeated header wins
			headers[k] = v
		}
	}
	b.jb.Bad = append(b.jb.Bad, journal.Bad{
		Reason:      inv.Reason,
		Detail:      inv.Detail,
		Destination: dest,
		MessageID:   m.Header.Get("message-id"),
		Headers:     headers,
		Body:        m.Body,
	})
	if b.quarantined == nil {
		b.quarantined = map[message.Reason]int{}
	}
	b.quarantined[inv.Reason]++
}

// write stores the batch with one Ingest call. It runs detached from ctx, so that a
// shutdown lets the batch in flight finish.
func (s *Subscriber) write(ctx context.Context, dest string, b *batch, log *slog.Logger) error {
	if h := s.hooks.beforeIngest; h != nil {
		h(ctx, dest, len(b.msgs))
	}
	// Detached from ctx: a shutdown lets the batch in flight finish (commit then ack).
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommitTimeout)
	start := time.Now()
	res, err := journal.Ingest(cctx, s.db, b.jb)
	cancel()
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
	}
	log = log.With("batch_id", b.id)
	log.Debug("batch committed", "messages", len(b.msgs), "inserted", res.Inserted, "duplicates", res.Duplicates,
		"conflicts", res.Conflicts, "quarantined", res.Quarantined, "commit_ms", time.Since(start).Milliseconds())
	for _, bad := range b.jb.Bad {
		log.Warn("message quarantined", "message_id", bad.MessageID, "reason", string(bad.Reason), "detail", bad.Detail, "bytes", len(bad.Body))
	}
	if res.Conflicts > 0 {
		log.Warn("ids journaled before with a different payload; quarantined as id_conflict", "conflicts", res.Conflicts)
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
