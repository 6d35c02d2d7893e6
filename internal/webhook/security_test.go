package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

func post(t *testing.T, client *http.Client, url string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Authorization", token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 10: {"resolved":"9223372036854775807.2147483647"} was stored for good (the
// watermark only moves forward) and the lag read -7.4e9 s. It is now ignored, counted,
// and answered 200 (a 4xx would block the feed forever); a poisoned row already in the
// table is replaced by the next plausible resolved timestamp.
func TestResolvedFromTheFarFutureIsIgnored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	m := metrics.New()
	h := webhook.New(webhook.Config{AuthHeader: token, Sink: "journal"}, &fakeProcessor{}, db.Pool, m, nil)
	url, client := serve(t, h)

	for _, body := range []string{`{"resolved":"9223372036854775807.2147483647"}`, `{"__crdb__":{"resolved":"9223372036854775807.0"}}`} {
		if code, resp := post(t, client, url, []byte(body)); code != 200 {
			t.Fatalf("%s: %d %s", body, code, resp)
		}
	}
	if _, found, err := webhook.ReadWatermark(ctx, db.Pool, "journal"); err != nil || found {
		t.Fatalf("a forged resolved timestamp was stored: found=%v %v", found, err)
	}
	if v := gauge(t, m, "inboxd_webhook_batches_total"); v != 2 {
		t.Errorf("batches counted %v, want 2 (resolved_ignored)", v)
	}
	if !h.Resolved().IsZero() {
		t.Errorf("handler's resolved = %s", h.Resolved())
	}

	// State poisoned before this fix: the next real resolved timestamp replaces it.
	forged := webhook.HLC{WallTime: 9223372036854775807, Logical: 2147483647}
	if err := webhook.StoreWatermark(ctx, db.Pool, "journal", forged); err != nil {
		t.Fatal(err)
	}
	real := webhook.HLC{WallTime: time.Now().Add(-time.Second).UnixNano()}
	sink := &sinktest.Sink{URLs: []string{url}, Client: client, AuthHeader: token}
	if err := sink.Resolved(ctx, real); err != nil {
		t.Fatal(err)
	}
	if w, _, err := webhook.ReadWatermark(ctx, db.Pool, "journal"); err != nil || w.Resolved != real {
		t.Errorf("watermark = %s (%v), want %s", w.Resolved, err, real)
	}
	if lag := gauge(t, m, "inboxd_feed_watermark_lag_seconds"); lag < 0 {
		t.Errorf("lag %v < 0", lag)
	}
}

// Issue 10: the 503 body echoed the raw database error.
func TestUnavailableDoesNotEchoTheError(t *testing.T) {
	t.Parallel()
	proc := &fakeProcessor{err: errors.New(`failed to connect to host=10.9.8.7 user=inboxd database=prod: FATAL: password authentication failed`)}
	h := webhook.New(webhook.Config{AuthHeader: token}, proc, nil, metrics.New(), nil)
	url, client := serve(t, h)
	code, body := post(t, client, url, []byte(`{"payload":[{"after":{"id":"`+id1+`","status":"RECEIVED"}}],"length":1}`))
	if code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", code)
	}
	for _, leak := range []string{"10.9.8.7", "inboxd", "password", "prod"} {
		if strings.Contains(body, leak) {
			t.Errorf("503 body %s shows %q", body, leak)
		}
	}
}

// Issue 10: one POST of 6 MB of {} rows wrote 2M WARN lines and grew memory to
// 1.35 GB. Now: one line per batch, repeated warnings at most once a minute.
func TestPoisonBatchLogsOneLine(t *testing.T) {
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	h := webhook.New(webhook.Config{AuthHeader: token}, &fakeProcessor{}, nil, metrics.New(), log)
	url, client := serve(t, h)

	// 150 kB here (6 MB under -race takes minutes); the bound is per batch, not per size.
	const rows = 50_000
	body := append([]byte(`{"payload":[{}`), bytes.Repeat([]byte(`,{}`), rows-1)...)
	body = append(body, `]}`...)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 3 {
		if code, resp := post(t, client, url, body); code != 200 || !strings.Contains(resp, `"poison":50000`) {
			t.Fatalf("status %d %.200s", code, resp)
		}
	}
	runtime.ReadMemStats(&after)
	t.Logf("%d bytes, %d rows per POST: %.0f MB allocated per POST", len(body), rows, float64(after.TotalAlloc-before.TotalAlloc)/3/1e6)
	if n := strings.Count(logs.String(), "\n"); n != 1 {
		t.Errorf("%d log lines for 3 poison batches, want 1:\n%s", n, logs.String())
	}
	for range 100 {
		post(t, client, url, []byte(`not json`))
	}
	if n := strings.Count(logs.String(), "\n"); n != 2 {
		t.Errorf("%d log lines after 100 malformed bodies, want 2", n)
	}
}

// FuzzHandle posts arbitrary authenticated bodies to the handler: it never panics,
// answers only 200, 400 or 413 for rows (one poison row never fails a batch), and
// never stores a resolved timestamp from the far future (with no database, storing
// one would answer 503).
func FuzzHandle(f *testing.F) {
	for _, s := range []string{
		`{"payload":[],"length":0}`,
		`{"payload":[{"after":{"id":"` + id1 + `","status":"RECEIVED"}}],"length":1}`,
		`{"payload":[{},7,null,{"after":null},{"__crdb__":{"key":["x"]}}]}`,
		`{"resolved":"9223372036854775807.2147483647"}`,
		`{"__crdb__":{"resolved":"1.0"}}`,
		`{"resolved":"1700000000000000000"}`,
		`[]`, `null`, `{"payload":null}`,
	} {
		f.Add([]byte(s))
	}
	h := webhook.New(webhook.Config{AuthHeader: token, MaxBodyBytes: 1 << 16}, &fakeProcessor{}, nil, metrics.New(), nil)
	e := echo.New()
	h.Register(e, "/changefeed")
	f.Fuzz(func(t *testing.T, body []byte) {
		req := httptest.NewRequest(http.MethodPost, "/changefeed", bytes.NewReader(body))
		req.Header.Set("Authorization", token)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		msg, err := webhook.Decode(body)
		switch {
		case err != nil || len(body) > 1<<16:
			if rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
				t.Fatalf("malformed body answered %d", rec.Code)
			}
		case !msg.Resolved.IsZero() && msg.Resolved.Time().After(time.Now().Add(webhook.DefaultMaxResolvedAhead)):
			if rec.Code != http.StatusOK {
				t.Fatalf("far-future resolved answered %d: %s", rec.Code, rec.Body)
			}
		case !msg.Resolved.IsZero():
			if rec.Code != http.StatusServiceUnavailable { // no database to store it in
				t.Fatalf("resolved answered %d", rec.Code)
			}
		default:
			if rec.Code != http.StatusOK {
				t.Fatalf("batch answered %d: %s", rec.Code, rec.Body)
			}
		}
	})
}
