package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/journal"
)

// Event is the engine's view of an event, and what its handlers get: inboxd.Event
// (documented there, where users read it) without Key, which only the id source can
// read back and package inboxd adds at its boundary.
type Event struct {
	ID, Type, AggregateID string
	SequenceNo            int64
	Tag                   string
	Payload               json.RawMessage
	Attempt               int
	Mode                  eventctx.Mode
	ReplayRun             string
}

// modeOf is the mode of a claimed event's run: a retry after a failed attempt, or after
// an operator's retry (which requeues the event as FAILED with no attempts), else live.
func modeOf(h journal.Head) eventctx.Mode {
	if h.Attempts > 0 || h.Status == journal.StatusFailed {
		return eventctx.Retry
	}
	return eventctx.Live
}

// Handler and BatchHandler are the engine's inboxd.Handler and inboxd.BatchHandler,
// over its Event; their contract is documented there. In short: HandleBatch returns one
// error per event, or err for the call; on any failure the engine rolls the call back
// and runs each event through Handle in its own savepoint.
type (
	Handler interface {
		Handle(ctx context.Context, tx pgx.Tx, ev Event) error
	}
	BatchHandler interface {
		Handler
		HandleBatch(ctx context.Context, tx pgx.Tx, evs []Event) (errs []error, err error)
	}
)

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, tx pgx.Tx, ev Event) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, tx pgx.Tx, ev Event) error { return f(ctx, tx, ev) }

// ErrRejected marks a business rejection: errors.Is(err, ErrRejected) for any error
// built by Reject.
var ErrRejected = errors.New("rejected")

// ErrNoHandler is the failure recorded for an event type nobody registered. Under
// NoHandlerRetry it is retried like any failure, so registering a handler and retrying
// the event (or just waiting for the next attempt) recovers it.
var ErrNoHandler = errors.New(journal.NoHandlerError)

// What becomes of an event whose type has no handler (Config.NoHandler).
const (
	// NoHandlerRetry: a failed attempt like any other, retried with backoff until DEAD.
	NoHandlerRetry = "retry"
	// NoHandlerReject: REJECTED at once, as a business rejection would be.
	NoHandlerReject = "reject"
	// NoHandlerPark: FAILED once, then held (its next attempt at ParkedUntil) until an
	// engine starts with a handler for its type (journal.WakeNoHandler); never DEAD.
	NoHandlerPark = "park"
)

// parkFor is how far a parked event's next attempt is put off: in effect never, until
// a start with its handler wakes it.
const parkFor = 10 * 365 * 24 * time.Hour

type rejection struct{ err error }

func (r rejection) Error() string        { return r.err.Error() }
func (r rejection) Unwrap() error        { return r.err }
func (r rejection) Is(target error) bool { return target == ErrRejected }

// Reject marks err as a business rejection. Reject(nil) is nil.
func Reject(err error) error {
	if err == nil {
		return nil
	}
	return rejection{err}
}

// Rejectf is Reject(fmt.Errorf(format, args...)).
func Rejectf(format string, args ...any) error { return Reject(fmt.Errorf(format, args...)) }

// Registry maps event types to handlers. It is safe for concurrent use, so handlers
// can be registered while the engine runs.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]Handler
	runOn    map[string]bool
	policies sync.Map // event type → RetryPolicy, see SetRetryPolicy
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{handlers: map[string]Handler{}, runOn: map[string]bool{}}
}

// RunOnDead makes a DEAD event of eventType let its aggregate's successors run on, as
// before parking existed: the event is recorded as skipped by journal.RunOnSkipper.
// By default a DEAD event parks its aggregate until an operator retries or skips it.
// It may be set before or after the type's handler is registered.
func (r *Registry) RunOnDead(eventType string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.runOn[eventType] = true
}

func (r *Registry) runsOnDead(eventType string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.runOn[eventType]
}

// Register adds the handler for an event type. Like http.Handle, it panics on an empty
// type, a nil handler or a type registered twice: those are wiring bugs.
func (r *Registry) Register(eventType string, h Handler) { r.set("Register", eventType, h, false) }

// Replace sets the handler of an event type, replacing any registered before: the
// public Client.Handle and inboxdcli.Register promise that. It panics like Register on an
// empty type or a nil handler.
func (r *Registry) Replace(eventType string, h Handler) { r.set("Replace", eventType, h, true) }

func (r *Registry) set(op, eventType string, h Handler, replace bool) {
	if eventType == "" {
		panic("process: " + op + " with an empty event type")
	}
	if h == nil {
		panic("process: " + op + " with a nil handler for " + eventType)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[eventType]; dup && !replace {
		panic("process: handler for " + eventType + " registered twice")
	}
	r.handlers[eventType] = h
}

// Lookup returns the handler for an event type.
func (r *Registry) Lookup(eventType string) (Handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[eventType]
	return h, ok
}

// OtherType is the metric label of every event type nobody registered.
const OtherType = "other"

// MetricLabel is the label an event type gets in metrics: itself when registered, else
// OtherType. Event types come from payloads and headers, so without this a publisher
// could create a time series per message.
func (r *Registry) MetricLabel(eventType string) string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if _, ok := r.handlers[eventType]; ok {
		return eventType
	}
	return OtherType
}

// batchHandler returns the handler for an event type if it is a BatchHandler.
func (r *Registry) batchHandler(eventType string) (BatchHandler, bool) {
	h, ok := r.Lookup(eventType)
	if !ok {
		return nil, false
	}
	bh, ok := h.(BatchHandler)
	return bh, ok
}

// Types returns the registered event types, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.handlers))
	for t := range r.handlers {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// SetRetryPolicy gives an event type its own recoverability policy; its zero fields
// take the engine's values. It may be set before or after the type's handler, and
// while the engine runs. It panics on an empty type or a negative field, like Register.
func (r *Registry) SetRetryPolicy(eventType string, p RetryPolicy) {
	if eventType == "" {
		panic("process: SetRetryPolicy with an empty event type")
	}
	if err := p.Validate(); err != nil {
		panic("process: SetRetryPolicy for " + eventType + ": " + err.Error())
	}
	r.policies.Store(eventType, p)
}

func (r *Registry) retryPolicy(eventType string) (RetryPolicy, bool) {
	v, ok := r.policies.Load(eventType)
	if !ok {
		return RetryPolicy{}, false
	}
	return v.(RetryPolicy), true
}
