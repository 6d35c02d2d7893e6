package ingest

import (
	"errors"
	"fmt"

	"github.com/go-stomp/stomp/v3"
)

// reader drains the subscription promptly until go-stomp closes it: go-stomp stalls the
// whole connection, heart-beats and acks included, while the subscription's 16-slot
// channel is full. It forwards to the batcher until the first error, the byte bound or
// stopReading, and discards afterwards (what it discards is unacked, so the broker
// redelivers it).
type reader struct {
	*session
	stopped bool  // no longer forwarding
	largest int64 // the largest body seen, for the reduced prefetch
}

func (r *reader) run() {
	defer close(r.readerDone)
	for m := range r.sub.C {
		if !r.stopped {
			r.forward(m)
		}
	}
	r.stop(fmt.Errorf("subscription to %s closed", r.dest))
}

// forward holds m's bytes and hands m to the batcher, or stops forwarding.
func (r *reader) forward(m *stomp.Message) {
	if m.Err != nil {
		r.stop(fmt.Errorf("subscription to %s: %w", r.dest, m.Err))
		return
	}
	n := int64(len(m.Body))
	r.largest = max(r.largest, n)
	if h := r.st.held.Load(); h > 0 && h+n > r.cfg.MaxInflightBytes {
		// Not taken, so not acked: the broker gives it to the next session.
		r.stop(&errOverBudget{largest: r.largest})
		return
	}
	r.st.hold(n)
	select {
	case r.msgs <- m:
	case <-r.stopReading:
		r.st.release(n, 1)
		r.stop(errors.New("stopped reading"))
	}
}

// stop ends forwarding, once, with readErr saying why.
func (r *reader) stop(err error) {
	if !r.stopped {
		r.readErr = err
		r.stopped = true
		close(r.msgs)
	}
}
