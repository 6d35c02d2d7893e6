// Package eventctx carries the journal event a handler is running for in its context,
// so that code the handler calls with nothing but its context and transaction (the
// outbox's Emit) knows the event and the mode of the run without importing the engine.
package eventctx

import (
	"context"
	"sync"
)

// Mode tells how a handler runs: the first run of an event, a retry, a replay or a
// shadow run (a dry run that is rolled back).
type Mode string

const (
	Live   Mode = "live"
	Retry  Mode = "retry"
	Replay Mode = "replay"
	Shadow Mode = "shadow"
)

// Event is the event a handler runs for.
type Event struct {
	ID   string
	Mode Mode
	// Run is the replay or shadow run's id; empty otherwise.
	Run string
}

type eventKey struct{}

// With returns ctx carrying ev.
func With(ctx context.Context, ev Event) context.Context {
	return context.WithValue(ctx, eventKey{}, ev)
}

// From returns the event ctx carries; ok is false outside a handler.
func From(ctx context.Context) (Event, bool) {
	ev, ok := ctx.Value(eventKey{}).(Event)
	return ev, ok
}

// Message is a message a handler emitted during a shadow run.
type Message struct {
	ID          string
	Destination string
	Headers     map[string]string
	Body        []byte
}

// Sink collects, in emit order, the messages of a shadow run instead of the outbox.
// It is safe for concurrent use.
type Sink struct {
	mu   sync.Mutex
	msgs []Message
}

// Add records m.
func (s *Sink) Add(m Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, m)
}

// Messages returns what was recorded, in emit order.
func (s *Sink) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Len is how many messages were recorded, a mark for Truncate.
func (s *Sink) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// Truncate forgets the messages recorded after mark n: those of a handler run whose
// savepoint was rolled back, as their outbox rows would have been.
func (s *Sink) Truncate(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < len(s.msgs) {
		s.msgs = s.msgs[:n]
	}
}

type sinkKey struct{}

// WithSink returns ctx whose Emit calls write to s instead of the outbox.
func WithSink(ctx context.Context, s *Sink) context.Context {
	return context.WithValue(ctx, sinkKey{}, s)
}

// SinkFrom returns the shadow run's sink, or nil.
func SinkFrom(ctx context.Context) *Sink {
	s, _ := ctx.Value(sinkKey{}).(*Sink)
	return s
}
