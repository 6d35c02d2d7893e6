package registration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/outbox"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		payload string
		want    registration.Registration
		err     string
	}{
		{"valid, normalized", `{"id":"x","name":" Ada ","email":" Ada@Example.COM ","jurisdiction":"MGA","createdAt":"2025-01-02T03:04:05Z"}`,
			registration.Registration{ID: "x", Name: "Ada", Email: "ada@example.com", Jurisdiction: "mga", CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}, ""},
		{"not json", `{`, registration.Registration{}, "unexpected end"},
		{"missing name", `{"email":"a@b.co","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "name is required"},
		{"blank name", `{"name":"  ","email":"a@b.co","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "name is required"},
		{"bad email", `{"name":"a","email":"nope","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "email"},
		{"email with display name", `{"name":"a","email":"A <a@b.co>","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "email"},
		{"email without dotted domain", `{"name":"a","email":"a@localhost","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "email"},
		{"missing jurisdiction", `{"name":"a","email":"a@b.co","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "jurisdiction"},
		{"long jurisdiction", `{"name":"a","email":"a@b.co","jurisdiction":"malta-gaming-authority","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "jurisdiction"},
		{"missing createdAt", `{"name":"a","email":"a@b.co","jurisdiction":"ukgc"}`, registration.Registration{}, "createdAt"},
		{"createdAt not RFC 3339", `{"name":"a","email":"a@b.co","jurisdiction":"ukgc","createdAt":"02/01/2025"}`, registration.Registration{}, "parsing time"},
		{"name wrong type", `{"name":5,"email":"a@b.co","jurisdiction":"ukgc","createdAt":"2025-01-02T03:04:05Z"}`, registration.Registration{}, "cannot unmarshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := registration.Parse([]byte(tt.payload))
			if tt.err != "" {
				if err == nil || !errors.Is(err, registration.ErrInvalid) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want ErrInvalid containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.CreatedAt.Equal(tt.want.CreatedAt) {
				t.Errorf("createdAt = %v, want %v", got.CreatedAt, tt.want.CreatedAt)
			}
			got.CreatedAt = tt.want.CreatedAt
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"id":"x","name":"Ada","email":"ada@example.com","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"name":"","email":"@","jurisdiction":"","createdAt":""}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		r, err := registration.Parse(payload)
		if err != nil {
			if !errors.Is(err, registration.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		// A valid registration is stable under normalization.
		again := r
		if err := again.Normalize(); err != nil || again != r {
			t.Fatalf("normalizing %+v again: %+v, %v", r, again, err)
		}
		if r.Name == "" || r.Email != strings.ToLower(r.Email) || r.Jurisdiction == "" || r.CreatedAt.IsZero() {
			t.Fatalf("accepted invalid registration %+v", r)
		}
	})
}

func TestHandle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	reg := process.NewRegistry()
	reg.Register(registration.EventType, registration.Handler)
	e := process.New(db.Pool, reg, process.Config{}, nil, nil)

	payload := func(id, email, jurisdiction string) []byte {
		return []byte(`{"id":"` + id + `","type":"registration","name":"Ada","email":"` + email + `","jurisdiction":"` + jurisdiction + `","createdAt":"2025-01-02T03:04:05Z"}`)
	}
	a, b, c, d := pt.NewID(), pt.NewID(), pt.NewID(), pt.NewID()
	ids := pt.Ingest(t, db.Pool,
		payload(a, "ada@example.com", "mga"),
		payload(b, "ADA@example.com", "MGA"),  // same email and jurisdiction once normalized
		payload(c, "ada@example.com", "ukgc"), // same email, other jurisdiction
		[]byte(`{"id":"`+d+`","type":"registration","name":"","email":"x","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`),
	)
	want := []process.Outcome{process.OutcomeProcessed, process.OutcomeRejected, process.OutcomeProcessed, process.OutcomeRejected}
	for i, id := range ids {
		got, err := e.Process(ctx, id)
		if err != nil || got != want[i] {
			t.Errorf("event %d: %q, %v; want %q", i, got, err, want[i])
		}
	}
	if _, _, le := pt.Status(t, db.Pool, b); !strings.Contains(le, "email already registered in jurisdiction") {
		t.Errorf("last_error of duplicate email = %q", le)
	}
	if _, _, le := pt.Status(t, db.Pool, d); !strings.Contains(le, "name is required") {
		t.Errorf("last_error of invalid registration = %q", le)
	}
	// A replay of a processed registration, even forced back to RECEIVED, is a no-op.
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'RECEIVED' WHERE id = $1`, a); err != nil {
		t.Fatal(err)
	}
	if got, err := e.Process(ctx, a); err != nil || got != process.OutcomeProcessed {
		t.Errorf("replayed registration: %q, %v; want processed (customer insert a no-op)", got, err)
	}
	n, err := registration.Count(ctx, db.Pool)
	if err != nil || n != 2 {
		t.Errorf("customers = %d, %v; want 2", n, err)
	}
	cust, ok, err := registration.Get(ctx, db.Pool, a)
	if err != nil || !ok || cust.Email != "ada@example.com" || cust.Jurisdiction != "mga" || cust.Name != "Ada" {
		t.Errorf("customer %s = %+v, %v, %v", a, cust, ok, err)
	}
	// One customer-registered outbox row per customer: none for rejections, none more
	// for the replay (its id derives from the registration).
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("outbox rows = %d, %v; want 2, one per customer", rows, err)
	}
	row, ok, err := outbox.Get(ctx, db.Pool, outbox.DerivedID(registration.EventCustomerRegistered, a))
	if err != nil || !ok {
		t.Fatalf("no customer-registered row for %s: %v", a, err)
	}
	var ev registration.CustomerRegistered
	if err := json.Unmarshal(row.Body, &ev); err != nil || ev.ID != row.ID || ev.CustomerID != a || ev.Type != registration.EventCustomerRegistered ||
		row.Destination != registration.CustomerEventsDestination || row.Headers["event-type"] != registration.EventCustomerRegistered ||
		row.Headers["aggregate-id"] != "mga:ada@example.com" {
		t.Errorf("customer-registered row %+v, body %s: %v", row, row.Body, err)
	}
}

// Processed as a batch (HandleBatch, one insert for many), every registration still
// emits its customer-registered event, as Handle does one by one.
func TestHandleBatchEmits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	reg := process.NewRegistry()
	reg.Register(registration.EventType, registration.Handler)
	e := process.New(db.Pool, reg, process.Config{}, nil, nil)
	var payloads [][]byte
	for i := range 5 {
		payloads = append(payloads, []byte(fmt.Sprintf(`{"id":%q,"type":"registration","name":"Ada","email":"ada%d@example.com","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`, pt.NewID(), i)))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	if _, _, err := e.ProcessDue(ctx, 0, 100, nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if st, _, le := pt.Status(t, db.Pool, id); st != "PROCESSED" {
			t.Fatalf("%s: %s %s", id, st, le)
		}
		if _, ok, err := outbox.Get(ctx, db.Pool, outbox.DerivedID(registration.EventCustomerRegistered, id)); err != nil || !ok {
			t.Errorf("no customer-registered row for %s (%v)", id, err)
		}
	}
}

// statementCounter is a pgx tracer counting the statements a connection sends.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// Issue 20, item 3: HandleBatch is set-based for its outbox messages too: a batch of
// 200 registrations costs two statements (the customers and their customer-registered
// messages), not one or two more per event (INSERT … RETURNING and pg_notify: 401
// statements at first, 201 with Emit's single statement); and the messages keep the
// batch's order.
func TestHandleBatchEmitsWithOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	counter := &statementCounter{}
	pool := db.OpenPool(t, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = counter })
	const n = 200
	evs := make([]process.Event, n)
	for i := range evs {
		id := pt.NewID()
		evs[i] = process.Event{ID: id, Type: registration.EventType, Payload: []byte(fmt.Sprintf(
			`{"id":%q,"type":"registration","name":"Ada","email":"ada%d@example.com","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`, id, i))}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := counter.n.Load()
	errs, err := registration.Handler.(process.BatchHandler).HandleBatch(ctx, tx, evs)
	sent := counter.n.Load() - before
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("event %d: %v", i, e)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("HandleBatch of %d registrations: %d statements", n, sent)
	if sent > 2 {
		t.Errorf("HandleBatch of %d registrations sent %d statements, want 2", n, sent)
	}
	var prev int64
	for i, ev := range evs {
		var seq int64
		if err := db.Pool.QueryRow(ctx, `SELECT seq FROM outbox WHERE id = $1`, outbox.DerivedID(registration.EventCustomerRegistered, ev.ID)).Scan(&seq); err != nil {
			t.Fatalf("event %d's customer-registered row: %v", i, err)
		}
		if seq <= prev {
			t.Fatalf("event %d's message has seq %d after %d: not in batch order", i, seq, prev)
		}
		prev = seq
	}
}

// newDB is a test database with inboxd's schema and the demo's customers table.
func newDB(t *testing.T) *testenv.DB {
	t.Helper()
	db := testenv.NewDB(t)
	if err := registration.Migrate(context.Background(), db.Pool); err != nil {
		t.Fatal(err)
	}
	return db
}
