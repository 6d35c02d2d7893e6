package inboxd

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/hook"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/process"
)

// engineHandler is how the engine (package process) calls a Handler: it hands over
// the engine's own process.Event, which gains the Key that only the id source can read.
type engineHandler struct {
	h   Handler
	src message.IDSource
}

func (a engineHandler) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	return a.h.Handle(ctx, tx, a.event(ev))
}

func (a engineHandler) event(ev process.Event) Event {
	return Event{ID: ev.ID, Key: message.EventKey(ev.Payload, a.src), Type: ev.Type, AggregateID: ev.AggregateID,
		SequenceNo: ev.SequenceNo, Tag: ev.Tag, Payload: ev.Payload, Attempt: ev.Attempt,
		Mode: EventMode(ev.Mode), ReplayRun: ev.ReplayRun}
}

// engineBatchHandler is engineHandler for a BatchHandler, so that the engine sees a
// process.BatchHandler exactly when the caller gave a BatchHandler.
type engineBatchHandler struct {
	engineHandler
	b BatchHandler
}

func (a engineBatchHandler) HandleBatch(ctx context.Context, tx pgx.Tx, evs []process.Event) ([]error, error) {
	out := make([]Event, len(evs))
	for i, ev := range evs {
		out[i] = a.event(ev)
	}
	return a.b.HandleBatch(ctx, tx, out)
}

// engineHandlerOf wraps h for the engine, reading Event.Key with src.
func engineHandlerOf(h Handler, src message.IDSource) process.Handler {
	a := engineHandler{h: h, src: src}
	if b, ok := h.(BatchHandler); ok {
		return engineBatchHandler{engineHandler: a, b: b}
	}
	return a
}

// The test kit (inboxdtest) wraps handlers as Handle does.
func init() {
	hook.EngineHandler = func(h any, src message.IDSource) process.Handler { return engineHandlerOf(h.(Handler), src) }
}
