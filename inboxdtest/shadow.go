package inboxdtest

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd"
)

// Shadow runs h, for eventType, as a shadow replay (Client.ShadowReplay) over the
// history on pool, typically recorded by Run with the handler as it was: each event in
// a transaction that is rolled back, nothing published. It returns the report of what
// h does differently from what was recorded; opts selects the events and sets the
// noise rules. A handler change can so be tested against recorded behaviour in a unit
// test:
//
//	inboxdtest.Run(t, pool, "order.placed", oldHandler, history...)
//	rep := inboxdtest.Shadow(t, pool, "order.placed", newHandler, inboxd.ShadowOptions{Ignore: []string{"body.$.at"}})
//	if rep.Summary.Differing != 0 { … }
func Shadow(t TB, pool *pgxpool.Pool, eventType string, h inboxd.Handler, opts inboxd.ShadowOptions) *inboxd.ShadowReport {
	t.Helper()
	c, err := inboxd.New(pool, inboxd.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("inboxdtest: %v", err)
	}
	c.Handle(eventType, h)
	rep, err := c.ShadowReplay(context.Background(), opts)
	if err != nil {
		t.Fatalf("inboxdtest: shadow replay: %v", err)
	}
	return rep
}
