package api

import (
	"context"
	"net/http"
	"testing"
	"time"
)

func TestJournalRates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration", map[string]any{"a": 1}, map[string]any{"a": 2}, map[string]any{"a": 3})
	ctx := context.Background()
	// One entry received 5 minutes ago and processed 4 minutes ago, one processed now,
	// one received 20 minutes ago (outside a 10-minute window). Settling an entry sets
	// updated_at with processed_at, as the engine does.
	for _, q := range []struct {
		sql string
		id  string
	}{
		{`UPDATE journal SET received_at = now() - interval '5 minutes' WHERE id = $1`, ids[0]},
		{`UPDATE journal_state SET processed_at = now() - interval '4 minutes', updated_at = now() - interval '4 minutes', status = 'PROCESSED' WHERE id = $1`, ids[0]},
		{`UPDATE journal_state SET processed_at = now(), status = 'PROCESSED' WHERE id = $1`, ids[1]},
		{`UPDATE journal SET received_at = now() - interval '20 minutes' WHERE id = $1`, ids[2]},
	} {
		if _, err := h.db.Pool.Exec(ctx, q.sql, q.id); err != nil {
			t.Fatal(err)
		}
	}
	var out ratesResponse
	r := h.do(t, http.MethodGet, "/journal/rates?minutes=10", nil)
	if r.Code != http.StatusOK {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	r.JSON(t, &out)
	if out.BucketSeconds != 10 || len(out.Buckets) != 60 {
		t.Fatalf("bucket_seconds %d, %d buckets; want 10 and 60", out.BucketSeconds, len(out.Buckets))
	}
	var in, done int64
	for i, b := range out.Buckets {
		in += b.Journaled
		done += b.Processed
		if i > 0 && !b.Start.Equal(out.Buckets[i-1].Start.Add(10*time.Second)) {
			t.Fatalf("bucket %d starts %s, after %s", i, b.Start, out.Buckets[i-1].Start)
		}
	}
	if in != 2 || done != 2 {
		t.Errorf("journaled %d, processed %d in the window; want 2 and 2", in, done)
	}
	last := out.Buckets[len(out.Buckets)-1]
	if out.Now.Before(last.Start) || out.Now.After(last.Start.Add(10*time.Second)) {
		t.Errorf("now %s is not in the last bucket starting %s", out.Now, last.Start)
	}
	if last.Journaled != 1 || last.Processed != 1 {
		t.Errorf("last bucket %+v, want the entry received and processed now", last)
	}

	for _, q := range []string{"minutes=0", "minutes=61", "minutes=x", "minutes=1&minutes=2", "window=5"} {
		expectError(t, h.do(t, http.MethodGet, "/journal/rates?"+q, nil), http.StatusBadRequest)
	}
}

// A page on another site cannot make an operator's browser change anything: state-changing
// requests a browser marks as cross-origin are refused, token or not; programs and
// same-origin pages pass.
func TestCrossOriginRefused(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil) // no admin token: the case where CSRF would otherwise work
	ids := seedEvents(t, h.db.Pool, "registration", map[string]any{"a": 1})
	setStatus(t, h.db.Pool, "DEAD", ids...)
	path := "/admin/events/" + ids[0] + "/retry"
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "https://evil.example"},
	} {
		expectError(t, h.do(t, http.MethodPost, path, "{}", hdr...), http.StatusForbidden)
		expectError(t, h.do(t, http.MethodPost, "/admin/events/replay", `{"type":"registration"}`, hdr...), http.StatusForbidden)
	}
	var st string
	if err := h.db.Pool.QueryRow(context.Background(), `SELECT status FROM journal_state WHERE id = $1`, ids[0]).Scan(&st); err != nil || st != "DEAD" {
		t.Fatalf("status %q (%v) after refused requests, want DEAD", st, err)
	}
	// Reading stays open to any origin's navigation; only unsafe methods are checked.
	if r := h.do(t, http.MethodGet, "/journal/stats", nil, "Sec-Fetch-Site", "cross-site"); r.Code != http.StatusOK {
		t.Errorf("cross-site GET: %d", r.Code)
	}
	for _, hdr := range [][]string{nil, {"Sec-Fetch-Site", "same-origin"}} {
		if r := h.do(t, http.MethodPost, path, "{}", hdr...); r.Code != http.StatusOK {
			t.Errorf("POST with %v: %d %s", hdr, r.Code, r.Body)
		}
	}
}

// On PostgreSQL there is no changefeed: /admin/feed says so rather than failing.
func TestAdminFeedOnPostgreSQL(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.AdminToken = "t" })
	expectError(t, h.do(t, http.MethodGet, "/admin/feed", nil), http.StatusUnauthorized)
	r := h.do(t, http.MethodGet, "/admin/feed", nil, "Authorization", "Bearer t")
	if r.Code != http.StatusOK {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	if got := string(r.Body); got != `{"database":"postgresql","jobs":[]}`+"\n" {
		t.Errorf("body %s", got)
	}
}
