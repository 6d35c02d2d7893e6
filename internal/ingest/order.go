package ingest

import (
	"errors"
	"slices"
)

// The ordering rules of a session, written here once; the committer and the acker ask
// admit and mayAck, and decide nothing else about order. The batcher hands batches to
// the committer one at a time, in the order their messages came from the broker
// (dispatch order), and up to CommitsInFlight of them are written at once:
//
//  1. Acks follow dispatch order: the committer queues each batch on flights before
//     writing it, and the one acker takes them off in that order. So a cumulative ack
//     ("client") only ever covers this batch and batches already committed and acked.
//  2. The broker is acked only after the commit: a batch is acked once its write has
//     returned nil, never before and never if it failed. Until then the broker keeps
//     the messages, and redelivers them whatever becomes of this process.
//  3. Nothing is acked after the first failure, of a write or an ack, and once the
//     acker has seen one nothing more is dispatched. A batch committed after an earlier
//     one failed stays unacked: the broker redelivers it, in order behind the failed
//     one, and the journal collapses it.
//  4. A batch is written only once every write under way that shares an event id or an
//     aggregate with it has returned. That keeps one aggregate's sequence numbers, commit
//     order and so processing order in broker order, and lets the journal judge a
//     repeated id against the committed first one.
//  5. No batch is written once a write of this session has failed (issue 18): the failed
//     batch's events come back redelivered, later, so a batch of the same aggregate
//     committed now would take the earlier sequence numbers. This rule asks the writes
//     themselves (writeFailed), because the acker's failed lags behind them. A batch that
//     may not be written is skipped, and by rule 3 it is not acked either.

// flight is a batch dispatched to the committer, on its way to the acker.
type flight struct {
	b       *batch
	done    chan error    // the write's outcome, or errSkipped; buffered, sent once
	written chan struct{} // closed once the write has returned, or was skipped
}

// errSkipped stands for a batch not written because an earlier one failed.
var errSkipped = errors.New("batch skipped after an earlier batch failed")

// admit decides the fate of b, the next batch in dispatch order: not dispatched at all
// (nil), dispatched but skipped (write false), or dispatched and to be written. It
// blocks while CommitsInFlight batches are dispatched and not yet acked, and while
// an overlapping write is under way.
func (c *committer) admit(b *batch) (f *flight, write bool) {
	if isClosed(c.failed) {
		return nil, false // rule 3: the acker acks nothing more, so nothing need be written
	}
	f = &flight{b: b, done: make(chan error, 1), written: make(chan struct{})}
	c.flights <- f // rule 1
	c.running = slices.DeleteFunc(c.running, func(r *flight) bool { return isClosed(r.written) })
	for _, r := range c.running {
		if r.b.overlaps(b) {
			<-r.written // rule 4
		}
	}
	if isClosed(c.failed) || isClosed(c.writeFailed) {
		return f, false // rules 3 and 5
	}
	c.running = append(c.running, f)
	return f, true
}

// wrote reports the outcome of f's write. A failure is recorded before f.written is
// closed, so that a batch waiting for f (rule 4) then sees it (rule 5).
func (c *committer) wrote(f *flight, err error) {
	if err != nil {
		c.failOnce.Do(func() { close(c.writeFailed) })
	}
	f.done <- err
	close(f.written)
}

// mayAck waits for f's write and says whether its batch may be acked (rule 2), or
// why the session fails here. After a failure it waits out the writes in flight and
// acks none of them (rule 3).
func (a *acker) mayAck(f *flight) (bool, error) {
	err := <-f.done
	if a.commitErr != nil {
		return false, nil
	}
	return err == nil, err
}

// fail records the session's first failure, of a write or an ack: failed tells the
// batcher and the committer, and commitErr, set first, is the session's error.
func (a *acker) fail(err error) {
	a.commitErr = err
	close(a.failed)
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
