package ingest

import (
	"fmt"
	"time"

	"github.com/go-stomp/stomp/v3"
)

// acker acknowledges committed batches to the broker (mayAck, in order.go, says which
// and when) and releases what they held.
type acker struct{ *session }

func (a *acker) run() {
	defer close(a.drained)
	for f := range a.flights {
		ok, err := a.mayAck(f)
		if ok {
			err = a.ackBatch(f.b)
		}
		if err != nil {
			a.fail(err)
		}
	}
}

// ackBatch acknowledges a committed batch: one cumulative ACK for its last message, or
// one ACK per message. Then the batch's bytes are released, and the destination has
// progressed.
func (a *acker) ackBatch(b *batch) error {
	var err error
	if a.ackMode == stomp.AckClient {
		// Cumulative: covers every earlier message of this subscription, all of which
		// belong to this batch or to batches already committed.
		err = a.conn.Ack(b.msgs[len(b.msgs)-1])
	} else {
		for _, m := range b.msgs {
			if err = a.conn.Ack(m); err != nil {
				break
			}
		}
	}
	if err != nil {
		return fmt.Errorf("acking committed batch of %d (the broker will redeliver it as duplicates): %w", len(b.msgs), err)
	}
	if m := a.cfg.Metrics; m != nil {
		m.Acked.WithLabelValues(a.dest).Add(float64(len(b.msgs)))
	}
	a.st.release(b.bytes, len(b.msgs))
	a.st.lastCommit.Store(time.Now().UnixNano())
	a.st.failures.Store(0)
	a.st.failingSince.Store(0)
	if m := a.cfg.Metrics; m != nil {
		m.MarkIngestCommit()
	}
	a.onCommitted()
	a.committed = true
	return nil
}
