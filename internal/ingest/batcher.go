package ingest

import (
	"context"
	"errors"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/tracing"
)

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

// batcher decodes the reader's messages into batches and hands each to the committer:
// once it is full, or Linger after its first message while the committer is busy.
type batcher struct {
	*session
	cur    *batch // being collected
	due    bool   // cur has lingered: it goes as soon as the committer takes it
	linger *time.Timer
	// renew ends a session whose prefetch is reduced after reducedPrefetchFor; nil otherwise.
	renew <-chan time.Time
}

// run collects until the session must end, and says why, with the batch it was
// collecting (not handed over).
func (bt *batcher) run(ctx context.Context) (ending, *batch) {
	bt.linger = time.NewTimer(time.Hour)
	bt.linger.Stop()
	defer bt.linger.Stop()
	if bt.prefetch < bt.cfg.Prefetch {
		t := time.NewTimer(reducedPrefetchFor)
		defer t.Stop()
		bt.renew = t.C
	}
	for {
		// A batch is full at BatchSize messages, or once one more message might not fit
		// the same statement (journal.Room): CockroachDB refuses a statement over 16 MiB.
		full := bt.cur != nil && (len(bt.cur.msgs) >= bt.cfg.BatchSize ||
			!journal.Room(bt.cur.rows, bt.cfg.MaxBodyBytes, bt.cfg.MaxStatementBytes))
		var out chan<- *batch
		if bt.cur != nil && (bt.due || full) {
			out = bt.batches
		}
		var in <-chan *stomp.Message
		if !full {
			in = bt.msgs
		}
		var lingerC <-chan time.Time
		if bt.cur != nil && !bt.due {
			lingerC = bt.linger.C
		}
		select {
		case <-ctx.Done():
			return endCanceled, bt.cur
		case <-bt.failed:
			return endFailed, bt.cur
		case <-bt.renew:
			return endRenew, bt.cur
		case m, ok := <-in:
			if !ok {
				return endRead, bt.cur
			}
			if bt.cur == nil {
				bt.cur = &batch{id: bt.batchSeq.Add(1), jb: journal.Batch{MaxStatementBytes: bt.cfg.MaxStatementBytes}}
				bt.due = false
				bt.linger.Reset(bt.cfg.Linger)
			}
			bt.add(bt.cur, m)
		case <-lingerC:
			bt.due = true
		case out <- bt.cur:
			bt.cur = nil
			bt.linger.Stop()
		}
	}
}

// add decodes m into the batch: a journal entry, or a quarantine row with the raw body.
func (bt *batcher) add(b *batch, m *stomp.Message) {
	b.msgs = append(b.msgs, m)
	b.bytes += int64(len(m.Body))
	if mt := bt.cfg.Metrics; mt != nil {
		mt.Received.WithLabelValues(bt.dest).Inc()
	}
	ev, err := message.Decode(m.Body, m.Header.Get, message.Options{
		MaxBodyBytes: bt.cfg.MaxBodyBytes, DefaultEventType: bt.cfg.DefaultEventType, IDSource: bt.cfg.IDSource,
		Headers: func(yield func(string, string) bool) { // a binary-mode CloudEvent's extension attributes
			for i := range m.Header.Len() {
				if k, v := m.Header.GetAt(i); !yield(k, v) {
					return
				}
			}
		}})
	if err == nil {
		e := journal.Entry{Event: ev, Destination: bt.dest,
			MessageID: m.Header.Get("message-id"), Headers: func() map[string]string { return headerMap(m) },
			TraceContext: tracing.Extract(m.Header.Get)}
		b.jb.Entries = append(b.jb.Entries, e)
		b.rows += journal.EntryBytes(e)
		if bt.cfg.CommitsInFlight > 1 {
			if b.keys == nil {
				b.keys = make(map[string]struct{}, 2*bt.cfg.BatchSize)
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
		Destination: bt.dest,
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
