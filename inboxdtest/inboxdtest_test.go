package inboxdtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// orders is a handler as a newcomer writes one: string ids, a rejection, an emission.
type orders struct{ batches int }

func (o *orders) Handle(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
	if ev.Key == "ord-bad" {
		return inboxd.Reject(errors.New("no customer"))
	}
	if ev.Key == "ord-flaky" {
		return errors.New("payment gateway down")
	}
	if _, err := tx.Exec(ctx, `INSERT INTO orders (key) VALUES ($1)`, ev.Key); err != nil {
		return err
	}
	_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: "/queue/order-events", Body: []byte(`{"accepted":"` + ev.Key + `"}`)})
	return err
}

// batchOrders is orders as a BatchHandler: one call for the clean events.
type batchOrders struct{ orders }

func (b *batchOrders) HandleBatch(ctx context.Context, tx pgx.Tx, evs []inboxd.Event) ([]error, error) {
	b.batches++
	msgs := make([]inboxd.Outgoing, 0, len(evs))
	for _, ev := range evs {
		if ev.Key != "ord-0001" && ev.Key != "ord-0002" {
			return nil, errors.New("not clean: each event alone")
		}
		if _, err := tx.Exec(ctx, `INSERT INTO orders (key) VALUES ($1)`, ev.Key); err != nil {
			return nil, err
		}
		msgs = append(msgs, inboxd.Outgoing{Destination: "/queue/order-events", Body: []byte(`{"accepted":"` + ev.Key + `"}`)})
	}
	_, err := inboxd.EmitBatch(ctx, tx, msgs)
	return make([]error, len(evs)), err
}

// TestRun: Run gives each event the engine's outcome, in a real transaction (a
// rejected or failed event's writes are rolled back with its savepoint), and shows what
// the handler emitted; a BatchHandler takes the batch path, falling back per event.
func TestRun(t *testing.T) {
	t.Parallel()
	msgs := []inboxdtest.Message{
		{Body: []byte(`{"id":"ord-0001","total":12}`)},
		{Body: []byte(`{"id":"ord-bad","total":1}`)},
		{Body: []byte(`{"id":"ord-0002","total":7}`)},
		{Body: []byte(`{"id":"ord-flaky","total":3}`)},
	}
	for _, tt := range []struct {
		name        string
		h           inboxd.Handler
		wantBatches int
	}{
		{"Handler", &orders{}, 0},
		{"BatchHandler", &batchOrders{}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			pool := inboxdtest.NewDB(t)
			if _, err := pool.Exec(context.Background(), `CREATE TABLE orders (key TEXT PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			rep := inboxdtest.RunWith(t, pool, inboxdtest.Options{RetryPolicy: inboxd.RetryPolicy{MaxAttempts: 2}}, "order.placed", tt.h, msgs...)
			r := inboxdtest.RequireOutcome(t, rep, "ord-0001", inboxdtest.OutcomeProcessed)
			if r.ID != inboxd.JournalID("ord-0001") {
				t.Errorf("journal id %s, want JournalID(ord-0001)", r.ID)
			}
			inboxdtest.RequireOutcome(t, rep, "ord-0002", inboxdtest.OutcomeProcessed)
			if r := inboxdtest.RequireOutcome(t, rep, "ord-bad", inboxdtest.OutcomeRejected); r.Err != "no customer" {
				t.Errorf("rejection recorded as %q", r.Err)
			}
			inboxdtest.RequireOutcome(t, rep, "ord-flaky", inboxdtest.OutcomeFailed)
			sent := inboxdtest.RequireEmitted(t, rep, "/queue/order-events", 2)
			if string(sent[0].Body) != `{"accepted":"ord-0001"}` || string(sent[1].Body) != `{"accepted":"ord-0002"}` {
				t.Errorf("emitted %s, %s", sent[0].Body, sent[1].Body)
			}
			var n int
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 2 {
				t.Errorf("orders rows = %d (%v), want 2: a failed event's writes roll back with its savepoint", n, err)
			}
			if b, ok := tt.h.(*batchOrders); ok && b.batches < tt.wantBatches {
				t.Errorf("HandleBatch called %d times, want at least %d", b.batches, tt.wantBatches)
			}
		})
	}
}

// fakeT records what the kit's assertions do, to test them failing.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}

// TestRequireFails: the assertions fail with what differed.
func TestRequireFails(t *testing.T) {
	rep := &inboxdtest.Report{Results: []inboxdtest.Result{{ID: "x", Key: "ord-1", Outcome: inboxdtest.OutcomeFailed, Err: "boom"}},
		Emitted: []inboxd.Outgoing{{Destination: "/queue/a"}}}
	for _, tt := range []struct {
		name string
		call func(f *fakeT)
		want string
	}{
		{"outcome", func(f *fakeT) { inboxdtest.RequireOutcome(f, rep, "ord-1", inboxdtest.OutcomeProcessed) }, "event ord-1: outcome failed (boom), want processed"},
		{"unknown", func(f *fakeT) { inboxdtest.RequireOutcome(f, rep, "ord-2", inboxdtest.OutcomeProcessed) }, "event ord-2: not in this run"},
		{"emitted", func(f *fakeT) { inboxdtest.RequireEmitted(f, rep, "/queue/b", 1) }, "emitted 0 messages to /queue/b, want 1 (all: [/queue/a])"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeT{}
			func() {
				defer func() { _ = recover() }()
				tt.call(f)
			}()
			if f.failed != tt.want {
				t.Errorf("failure %q, want %q", f.failed, tt.want)
			}
		})
	}
}
