package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// seed ingests n events of the given type with payloads {"id", "n", "jurisdiction"} and
// returns their ids in ingest order.
func seed(t *testing.T, db database.DB, typ string, n int, jurisdiction func(i int) string) []string {
	t.Helper()
	var b journal.Batch
	ids := make([]string, n)
	for i := 0; i < n; i++ {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1)
		if typ != "registration" {
			ids[i] = fmt.Sprintf("00000000-0000-4000-9000-%012d", i+1)
		}
		body := fmt.Sprintf(`{"id":%q,"n":%d,"jurisdiction":%q}`, ids[i], i, jurisdiction(i))
		ev, err := message.Decode([]byte(body), func(string) string { return "" }, message.Options{DefaultEventType: typ})
		if err != nil {
			t.Fatal(err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/t"})
	}
	if _, err := journal.Ingest(context.Background(), db, b); err != nil {
		t.Fatal(err)
	}
	return ids
}

func setStatus(t *testing.T, db database.DB, status journal.Status, ids ...string) {
	t.Helper()
	if _, err := db.Exec(context.Background(), `UPDATE journal_state SET status = $1, attempts = 3, last_error = 'boom' WHERE id = ANY ($2::UUID[])`, string(status), ids); err != nil {
		t.Fatal(err)
	}
}

func TestListFilters(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	regs := seed(t, db.Pool, "registration", 6, func(i int) string { return []string{"mga", "ukgc"}[i%2] })
	seed(t, db.Pool, "payment", 3, func(int) string { return "mga" })
	setStatus(t, db.Pool, journal.StatusDead, regs[0], regs[2])
	future := time.Now().Add(time.Hour)

	tests := []struct {
		name string
		f    journal.Filter
		want int
	}{
		{"all", journal.Filter{}, 9},
		{"type", journal.Filter{EventType: "registration"}, 6},
		{"type and payload", journal.Filter{EventType: "registration", Contains: json.RawMessage(`{"jurisdiction":"mga"}`)}, 3},
		{"payload only", journal.Filter{Contains: json.RawMessage(`{"jurisdiction":"mga"}`)}, 6},
		{"payload number", journal.Filter{Contains: json.RawMessage(`{"n":1}`)}, 2},
		{"status", journal.Filter{Statuses: []journal.Status{journal.StatusDead}}, 2},
		{"status and payload", journal.Filter{Statuses: []journal.Status{journal.StatusDead, journal.StatusReceived}, Contains: json.RawMessage(`{"jurisdiction":"ukgc"}`)}, 3},
		{"since future", journal.Filter{Since: future}, 0},
		{"until future", journal.Filter{Until: future}, 9},
		{"unknown type", journal.Filter{EventType: "nope"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, more, err := journal.List(ctx, db.Pool, tt.f, journal.Page{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tt.want || more {
				t.Errorf("got %d entries (more=%v), want %d", len(got), more, tt.want)
			}
			n, err := journal.CountMatching(ctx, db.Pool, tt.f, journal.Replay)
			if err != nil || n != int64(tt.want) {
				t.Errorf("CountMatching = %d, %v; want %d", n, err, tt.want)
			}
		})
	}
}

func TestListPagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := seed(t, db.Pool, "registration", 23, func(int) string { return "mga" })
	for _, desc := range []bool{false, true} {
		for _, limit := range []int{1, 5, 23, 50} {
			t.Run(fmt.Sprintf("desc=%v/limit=%d", desc, limit), func(t *testing.T) {
				var seen []string
				var after *int64
				for pages := 0; ; pages++ {
					if pages > 30 {
						t.Fatal("too many pages")
					}
					got, more, err := journal.List(ctx, db.Pool, journal.Filter{EventType: "registration"}, journal.Page{Limit: limit, Desc: desc, After: after})
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range got {
						seen = append(seen, r.ID)
					}
					if !more {
						break
					}
					last := got[len(got)-1].SequenceNo
					after = &last
				}
				if len(seen) != len(ids) {
					t.Fatalf("walked %d entries, want %d", len(seen), len(ids))
				}
				for i := range ids {
					want := ids[i]
					if desc {
						want = ids[len(ids)-1-i]
					}
					if seen[i] != want {
						t.Fatalf("entry %d = %s, want %s", i, seen[i], want)
					}
				}
			})
		}
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := seed(t, db.Pool, "registration", 1, func(int) string { return "mga" })
	r, err := journal.Get(ctx, db.Pool, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != ids[0] || r.Status != journal.StatusReceived || r.EventType != "registration" || r.SequenceNo == 0 || r.ProcessedAt != nil {
		t.Errorf("unexpected record %+v", r)
	}
	var p map[string]any
	if err := json.Unmarshal(r.Payload, &p); err != nil || p["jurisdiction"] != "mga" {
		t.Errorf("payload %s: %v", r.Payload, err)
	}
	if _, err := journal.Get(ctx, db.Pool, "00000000-0000-4000-8000-999999999999"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("missing entry: err = %v, want ErrNotFound", err)
	}
}

func TestStatsAndWatermarks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	regs := seed(t, db.Pool, "registration", 4, func(int) string { return "mga" })
	seed(t, db.Pool, "payment", 1, func(int) string { return "mga" })
	setStatus(t, db.Pool, journal.StatusProcessed, regs[0], regs[1])
	bad := journal.Bad{Reason: message.ReasonNotJSON, Destination: "/queue/t", Body: []byte("x")}
	if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Bad: []journal.Bad{bad}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO feed_watermark (sink, resolved, resolved_at) VALUES ('a', '1.0', now() - interval '90 seconds')`); err != nil {
		t.Fatal(err)
	}
	s, err := journal.ReadStats(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total != 5 || s.ByStatus[journal.StatusProcessed] != 2 || s.ByStatus[journal.StatusReceived] != 3 || s.ByStatus[journal.StatusDead] != 0 {
		t.Errorf("by status %v total %d", s.ByStatus, s.Total)
	}
	if s.ByType["registration"][journal.StatusReceived] != 2 || s.ByType["payment"][journal.StatusReceived] != 1 {
		t.Errorf("by type %v", s.ByType)
	}
	if s.OldestPending == nil || s.Now.Before(*s.OldestPending) {
		t.Errorf("oldest pending %v now %v", s.OldestPending, s.Now)
	}
	if s.Quarantined != 1 || s.QuarantineNotReinjected != 1 {
		t.Errorf("quarantine %d/%d", s.Quarantined, s.QuarantineNotReinjected)
	}
	w, err := journal.FeedWatermarks(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(w) != 1 || w[0].Sink != "a" || w[0].Lag < 89*time.Second || w[0].Lag > 120*time.Second {
		t.Errorf("watermarks %+v", w)
	}
}

func TestRetryOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	ids := seed(t, db.Pool, "registration", 3, func(int) string { return "mga" })
	setStatus(t, db.Pool, journal.StatusDead, ids[0])
	setStatus(t, db.Pool, journal.StatusProcessed, ids[1])

	for i := 0; i < 2; i++ { // idempotent: the second call finds it FAILED and requeues it again
		r, err := journal.RetryOne(ctx, db.Pool, ids[0])
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != journal.StatusFailed || r.Attempts != 0 || r.NextAttemptAt.After(time.Now().Add(time.Second)) {
			t.Errorf("after retry: %+v", r)
		}
		if r.LastError == nil || *r.LastError != "boom" {
			t.Errorf("last_error should be kept as history, got %v", r.LastError)
		}
	}
	if r, err := journal.RetryOne(ctx, db.Pool, ids[1]); !errors.Is(err, journal.ErrNotRetryable) || r.Status != journal.StatusProcessed {
		t.Errorf("processed entry: %v, %v", r.Status, err)
	}
	if _, err := journal.RetryOne(ctx, db.Pool, "00000000-0000-4000-8000-999999999999"); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("missing entry: %v", err)
	}
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	n := journal.RequeueBatchSize + 7 // more than one batch
	ids := seed(t, db.Pool, "registration", n, func(i int) string { return []string{"mga", "ukgc"}[i%2] })
	setStatus(t, db.Pool, journal.StatusDead, ids[:10]...)
	setStatus(t, db.Pool, journal.StatusProcessed, ids[10:]...)

	mga := json.RawMessage(`{"jurisdiction":"mga"}`)
	tests := []struct {
		name string
		f    journal.Filter
		m    journal.RequeueMode
		want int64
	}{
		{"retry processed only matches nothing", journal.Filter{Statuses: []journal.Status{journal.StatusProcessed}}, journal.Retry, 0},
		{"retry dead mga", journal.Filter{Contains: mga}, journal.Retry, 5},
		{"retry remaining dead and failed", journal.Filter{}, journal.Retry, 10}, // the 5 now FAILED are requeued again
		{"replay all mga", journal.Filter{EventType: "registration", Contains: mga}, journal.Replay, int64((n + 1) / 2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dry, err := journal.CountMatching(ctx, db.Pool, tt.f, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := journal.Requeue(ctx, db.Pool, tt.f, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || dry != tt.want {
				t.Errorf("requeued %d (dry run %d), want %d", got, dry, tt.want)
			}
		})
	}
	var failed, zeroAttempts int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE s.status = 'FAILED'), count(*) FILTER (WHERE s.attempts = 0 AND s.next_attempt_at <= now())
		FROM journal_state AS s JOIN journal AS j ON j.id = s.id WHERE j.payload @> '{"jurisdiction":"mga"}'`).Scan(&failed, &zeroAttempts); err != nil {
		t.Fatal(err)
	}
	if failed != (n+1)/2 || zeroAttempts != (n+1)/2 {
		t.Errorf("after replay: %d FAILED, %d due with 0 attempts; want %d", failed, zeroAttempts, (n+1)/2)
	}
}

// TestRequeueScopes: a requeue walks each status (retry) or each event type (replay
// with no type) by keyset; every entry is requeued and counted once, across batches,
// and a DEAD entry turned FAILED is not walked again by the FAILED pass.
func TestRequeueScopes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	n := journal.RequeueBatchSize + 10
	regs := seed(t, db.Pool, "registration", n, func(int) string { return "mga" })
	pays := seed(t, db.Pool, "payment", 3, func(int) string { return "mga" })
	setStatus(t, db.Pool, journal.StatusDead, regs[:n-2]...)
	setStatus(t, db.Pool, journal.StatusFailed, regs[n-2:]...)
	setStatus(t, db.Pool, journal.StatusRejected, pays...)
	tests := []struct {
		name string
		f    journal.Filter
		m    journal.RequeueMode
		want int64
	}{
		{"retry every status", journal.Filter{}, journal.Retry, int64(n + 3)},
		{"replay every type since an hour ago", journal.Filter{Since: time.Now().Add(-time.Hour)}, journal.Replay, int64(n + 3)},
		{"replay until an hour ago", journal.Filter{Until: time.Now().Add(-time.Hour)}, journal.Replay, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dry, err := journal.CountMatching(ctx, db.Pool, tt.f, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			got, err := journal.Requeue(ctx, db.Pool, tt.f, tt.m)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || dry != tt.want {
				t.Errorf("requeued %d (dry run %d), want %d", got, dry, tt.want)
			}
		})
		setStatus(t, db.Pool, journal.StatusDead, regs[:n-2]...)
		setStatus(t, db.Pool, journal.StatusRejected, pays...)
	}
}

func TestReinject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	body := []byte{0xff, 'r', 'a', 'w'}
	bad := journal.Bad{Reason: message.ReasonNotJSON, Destination: "/queue/t", Body: body, Headers: map[string]string{"event-type": "registration"}}
	if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Bad: []journal.Bad{bad}}); err != nil {
		t.Fatal(err)
	}
	rows, more, err := journal.ListQuarantine(ctx, db.Pool, "", journal.QuarantinePage{Limit: 10})
	if err != nil || len(rows) != 1 || more {
		t.Fatalf("list: %v %d %v", err, len(rows), more)
	}
	q := rows[0]
	if q.Size != int64(len(body)) || q.Headers["event-type"] != "registration" || q.ReinjectedAt != nil {
		t.Errorf("record %+v", q)
	}
	_, got, err := journal.QuarantineBody(ctx, db.Pool, q.ID)
	if err != nil || string(got) != string(body) {
		t.Fatalf("body %q, %v", got, err)
	}

	var published int
	publish := func(ctx context.Context, q journal.QuarantineRecord, b []byte) error {
		if string(b) != string(body) {
			t.Errorf("published %q", b)
		}
		published++
		return nil
	}
	failing := func(context.Context, journal.QuarantineRecord, []byte) error { return errors.New("broker down") }

	if _, err := journal.Reinject(ctx, db.Pool, q.ID, false, failing); err == nil {
		t.Fatal("failing publish: want error")
	}
	if _, b, _ := journal.QuarantineBody(ctx, db.Pool, q.ID); b == nil {
		t.Fatal("row vanished")
	}
	res, err := journal.Reinject(ctx, db.Pool, q.ID, false, publish)
	if err != nil || !res.Published || res.Record.ReinjectedAt == nil {
		t.Fatalf("reinject: %+v %v", res, err)
	}
	res, err = journal.Reinject(ctx, db.Pool, q.ID, false, publish)
	if err != nil || res.Published || res.Record.ReinjectedAt == nil {
		t.Fatalf("second reinject: %+v %v", res, err)
	}
	if published != 1 {
		t.Errorf("published %d times, want 1", published)
	}
	if res, err = journal.Reinject(ctx, db.Pool, q.ID, true, publish); err != nil || !res.Published || published != 2 {
		t.Errorf("forced reinject: %+v %v (published %d)", res, err, published)
	}
	if _, err := journal.Reinject(ctx, db.Pool, "00000000-0000-4000-8000-999999999999", false, publish); !errors.Is(err, journal.ErrNotFound) {
		t.Errorf("missing row: %v", err)
	}
}

func TestListQuarantinePagination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	var b journal.Batch
	for i := 0; i < 9; i++ {
		b.Bad = append(b.Bad, journal.Bad{Reason: message.ReasonNotJSON, Destination: "/queue/t", Body: []byte(fmt.Sprint(i))})
	}
	// One statement: every row gets the same received_at, so the id breaks the ties.
	if _, err := journal.Ingest(ctx, db.Pool, b); err != nil {
		t.Fatal(err)
	}
	for _, desc := range []bool{false, true} {
		seen := map[string]bool{}
		var after *journal.QuarantineKey
		var prev *journal.QuarantineRecord
		for {
			rows, more, err := journal.ListQuarantine(ctx, db.Pool, string(message.ReasonNotJSON), journal.QuarantinePage{Limit: 2, Desc: desc, After: after})
			if err != nil {
				t.Fatal(err)
			}
			for i := range rows {
				r := rows[i]
				if seen[r.ID] {
					t.Fatalf("duplicate %s", r.ID)
				}
				seen[r.ID] = true
				if prev != nil && (prev.ID < r.ID) == desc {
					t.Fatalf("out of order: %s then %s (desc=%v)", prev.ID, r.ID, desc)
				}
				prev = &r
			}
			if !more {
				break
			}
			last := rows[len(rows)-1]
			after = &journal.QuarantineKey{ReceivedAt: last.ReceivedAt, ID: last.ID}
		}
		if len(seen) != 9 {
			t.Errorf("desc=%v: walked %d rows, want 9", desc, len(seen))
		}
	}
}
