package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/stompx"
)

// session is one connection and subscription of one destination, and the value its
// stages share. Each stage has one job and its own goroutine (the batcher runs in the
// session's):
//
//	sub.C ─▶ reader ─msgs─▶ batcher ─batches─▶ committer ─flights─▶ acker ─▶ ACK
//
// Each channel is closed by the one goroutine that sends on it, after its last send, so
// no send can meet a closed channel: msgs by the reader (readErr set first), batches by
// the session's (the batcher, then shutdown or abandon), flights by the committer once
// batches is closed. failed runs the other way: the acker closes it at the first
// failure, which ends the batcher and stops the committer. When and in which order
// batches are written and acked is order.go's.
type session struct {
	*Subscriber
	dest        string
	durable     bool // a durable topic subscription
	prefetch    int
	st          *destState
	log         *slog.Logger
	conn        *stompx.Conn
	sub         *stomp.Subscription
	onCommitted func() // after each batch committed and acked

	msgs        chan *stomp.Message // reader → batcher
	stopReading chan struct{}       // closed by shutdown or abandon: the reader stops forwarding
	readerDone  chan struct{}
	readErr     error // why the reader stopped forwarding; set before msgs is closed

	batches chan *batch  // batcher → committer
	flights chan *flight // committer → acker, in dispatch order
	failed  chan struct{}
	drained chan struct{} // closed by the acker: every batch dispatched is acked or given up

	// Written by the acker, read once drained is closed.
	commitErr error // the first failed write or ack; set before failed is closed
	committed bool  // at least one batch committed and acked
}

// runSession runs one connection and subscription of dest. It returns when ctx is canceled
// (after a clean shutdown, with a nil error unless cleanup failed) or when the
// connection or a commit fails. progressed reports whether at least one batch was
// committed and acked.
//
// onSubscribed runs once subscribed, onCommitted after each batch committed and acked.
func (s *Subscriber) runSession(ctx context.Context, dest string, prefetch int, log *slog.Logger,
	onSubscribed, onCommitted func()) (progressed bool, err error) {
	se, err := s.subscribe(ctx, dest, prefetch, log)
	if err != nil {
		return false, err
	}
	se.onCommitted = onCommitted
	// Whatever was taken and not acked is the broker's again.
	defer func() { se.st.release(se.st.held.Load(), int(se.st.heldMsgs.Load())) }()
	go (&reader{session: se}).run()
	if err := se.confirm(); err != nil {
		return false, err
	}
	s.ready.Add(1)
	se.st.since.Store(time.Now().UnixNano())
	se.st.subscribed.Store(true)
	defer func() {
		s.ready.Add(-1)
		se.st.subscribed.Store(false)
		se.st.since.Store(time.Now().UnixNano())
	}()
	onSubscribed()
	return se.run(ctx)
}

// subscribe connects and subscribes to dest, recording a durable subscription first.
func (s *Subscriber) subscribe(ctx context.Context, dest string, prefetch int, log *slog.Logger) (*session, error) {
	bcfg := s.cfg.broker()
	var dur *stompx.Durable
	durable, isDurable := s.cfg.durable(dest)
	if isDurable {
		// Sent on CONNECT whatever the broker: ActiveMQ keys the subscription by it, and
		// RabbitMQ ignores it (its dialect puts it in the subscription id instead).
		bcfg.ClientID = durable.ClientID
		dur = &stompx.Durable{ClientID: durable.ClientID, Name: durable.Name}
		log = log.With("client_id", durable.ClientID, "subscription", durable.Name)
	}
	conn, err := stompx.DialConn(ctx, bcfg)
	if err != nil {
		return nil, err
	}
	// The headers come from the broker's dialect, known once CONNECTED names the server.
	subOpts := conn.Dialect.SubscribeHeaders(prefetch, dur)
	if isDurable {
		// Recorded before SUBSCRIBE creates it, so that no subscription the broker keeps
		// messages for is unknown to "inboxd subscriptions list".
		if err := journal.RecordSubscription(ctx, s.db, durable.ClientID, durable.Name, dest); err != nil {
			conn.Abort()
			return nil, err
		}
	}
	if h := s.hooks.beforeSubscribe; h != nil {
		h(ctx, dest)
	}
	sub, err := conn.Subscribe(dest, s.ackMode, subOpts...)
	if err != nil {
		conn.Abort()
		return nil, fmt.Errorf("subscribing to %s: %w", dest, err)
	}
	return &session{Subscriber: s, dest: dest, durable: isDurable, prefetch: prefetch, st: s.dests[dest], log: log, conn: conn, sub: sub,
		msgs:        make(chan *stomp.Message, s.cfg.Prefetch+16),
		stopReading: make(chan struct{}),
		readerDone:  make(chan struct{}),
		batches:     make(chan *batch),
		// Plus the one the acker waits on: CommitsInFlight batches dispatched at once.
		flights: make(chan *flight, s.cfg.CommitsInFlight-1),
		failed:  make(chan struct{}),
		drained: make(chan struct{}),
	}, nil
}

// confirm waits until the broker has processed SUBSCRIBE (stompx.Conn.Barrier). Only
// then is the destination ready; for a non-durable topic that is when messages stop
// being lost. The reader runs meanwhile, since messages may arrive before the receipt.
func (se *session) confirm() error {
	if err := se.conn.Barrier(); err != nil {
		se.conn.Abort()
		<-se.readerDone
		return fmt.Errorf("subscribing to %s: %w", se.dest, err)
	}
	return nil
}

// ending is why the batcher stopped, which decides how the session ends.
type ending int

const (
	endCanceled ending = iota // ctx ended: shut down
	endRenew                  // the reduced prefetch has run its time: shut down, subscribe again
	endFailed                 // a write or an ack failed: abandon
	endRead                   // the reader stopped forwarding, readErr says why
)

// run runs the committer, the acker and the batcher until the session ends.
func (se *session) run(ctx context.Context) (bool, error) {
	se.log.Info("subscribed", "broker", se.conn.Dialect.String(), "ack", string(se.cfg.AckMode), "prefetch", se.prefetch, "batch", se.cfg.BatchSize,
		"durable", se.durable)
	se.noteDialect()
	go (&committer{session: se, writeFailed: make(chan struct{})}).run(ctx)
	go (&acker{session: se}).run()
	why, cur := (&batcher{session: se}).run(ctx)
	switch why {
	case endCanceled:
		return se.shutdown(cur)
	case endRenew:
		p, err := se.shutdown(cur)
		return p, cmp.Or(err, errRenew)
	case endRead:
		if _, over := errors.AsType[*errOverBudget](se.readErr); over {
			// Commit and ack what was taken, then let the broker have the rest back.
			p, err := se.shutdown(cur)
			return p, cmp.Or(err, se.readErr)
		}
		return se.abandon(se.readErr)
	default: // endFailed
		return se.abandon(nil)
	}
}

// shutdown ends the session on request: stop reading, commit and ack what was already
// collected, then unsubscribe and disconnect (whose receipt proves the acks arrived).
func (se *session) shutdown(cur *batch) (bool, error) {
	close(se.stopReading)
	if cur != nil {
		select {
		case se.batches <- cur:
		case <-se.failed:
		}
	}
	close(se.batches)
	<-se.drained
	if se.commitErr != nil {
		se.conn.Abort()
		<-se.readerDone
		return true, se.commitErr
	}
	// A broker slow to answer (ActiveMQ under load took seconds per receipt) must not
	// spend the whole shutdown budget here: past StopTimeout the connection is dropped,
	// which loses nothing (StopTimeout says why).
	var abort *time.Timer
	if d := se.cfg.StopTimeout; d > 0 {
		abort = time.AfterFunc(d, se.conn.Abort)
	}
	var errs []error
	if err := se.unsubscribe(); err != nil && !errors.Is(err, stomp.ErrCompletedSubscription) {
		errs = append(errs, fmt.Errorf("unsubscribing: %w", err))
	}
	if err := se.conn.Close(); err != nil {
		errs = append(errs, err)
	}
	dropped := abort != nil && !abort.Stop() // it fired: the errors above are the drop's
	<-se.readerDone
	if dropped {
		se.log.Info("the broker did not confirm the unsubscribe and disconnect within the stop timeout; dropped the connection "+
			"(it redelivers what it did not see acked, and the journal collapses the duplicates)", "stop_timeout", se.cfg.StopTimeout)
		return true, nil
	}
	se.log.Info("unsubscribed and disconnected")
	return true, errors.Join(errs...)
}

// unsubscribe sends UNSUBSCRIBE and returns once the subscription has ended: when
// go-stomp's Unsubscribe returns, or when the subscription's channel closes, whichever
// comes first. go-stomp's Unsubscribe can miss the wakeup of its own receipt (v3.1.5,
// subscription.go: its waiter is a goroutine that may begin waiting on the condition
// after closeChannel broadcast, which does not take the condition's lock); it then waits
// out its whole receipt timeout, and dropping the connection does not end it. The
// channel's close (the reader's end) is the receipt's, or the dropped connection's
// (StopTimeout), so the stop stays bounded; the call left behind ends with go-stomp's
// timeout, its waiter never (testenv's leak check ignores it, and says why).
func (se *session) unsubscribe() error {
	unsubscribe := func(sub *stomp.Subscription) error { return sub.Unsubscribe() }
	if h := se.hooks.unsubscribe; h != nil {
		unsubscribe = h
	}
	done := make(chan error, 1)
	go func() { done <- unsubscribe(se.sub) }()
	select {
	case err := <-done:
		return err
	case <-se.readerDone:
		return nil
	}
}

// abandon ends the session by dropping the connection without acking anything more:
// the broker redelivers whatever was not acked. Its error is the first failed write or
// ack, else cause.
func (se *session) abandon(cause error) (bool, error) {
	close(se.stopReading)
	se.conn.Abort()
	close(se.batches)
	<-se.drained
	<-se.readerDone
	return se.committed, cmp.Or(se.commitErr, cause)
}
