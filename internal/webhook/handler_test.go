package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

const token = "Bearer s3cret"

type fakeProcessor struct {
	mu    sync.Mutex
	items []process.Item
	err   error
}

func (f *fakeProcessor) ProcessBatch(_ context.Context, items []process.Item) ([]process.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.items = append(f.items, items...)
	out := make([]process.Outcome, len(items))
	for i := range out {
		out[i] = process.OutcomeProcessed
	}
	return out, f.err
}

// serve runs the handler on a TLS server and returns its URL and a client trusting it.
func serve(t *testing.T, h *webhook.Handler) (string, *http.Client) {
	t.Helper()
	e := echo.New()
	e.HideBanner = true
	h.Register(e, "/changefeed")
	srv := httptest.NewTLSServer(e)
	t.Cleanup(srv.Close)
	return srv.URL + "/changefeed", srv.Client()
}

// hiddenLength hides the body's length from net/http, so the request is chunked.
type hiddenLength struct{ io.Reader }

func TestHandlerRequests(t *testing.T) {
	t.Parallel()
	row := func(status, next string) string {
		after := `{"id":"` + id1 + `","status":"` + status + `","aggregate_id":"a","sequence_no":1`
		if next != "" {
			after += `,"next_attempt_at":"` + next + `"`
		}
		return `{"after":` + after + `},"key":["` + id1 + `"],"topic":"journal","updated":"1.0"}`
	}
	future := time.Now().Add(time.Hour).Format(time.RFC3339Nano)
	past := time.Now().Add(-time.Hour).Format("2006-01-02T15:04:05.999999-07:00")
	tests := []struct {
		name      string
		auth      string
		body      string
		chunked   bool
		procErr   error
		status    int
		errBody   string
		processed int
	}{
		{name: "no auth", body: `{"payload":[],"length":0}`, status: 401, errBody: "Authorization"},
		{name: "wrong auth", auth: "Bearer nope", body: `{"payload":[],"length":0}`, status: 401, errBody: "Authorization"},
		{name: "auth prefix only", auth: "Bearer", body: `{"payload":[],"length":0}`, status: 401},
		{name: "garbage", auth: token, body: `hello`, status: 400, errBody: "malformed"},
		{name: "too large", auth: token, body: `{"payload":[` + strings.Repeat(`{"after":null},`, 200) + `{"after":null}],"length":201}`, status: 413},
		{name: "too large, chunked", auth: token, chunked: true, body: `{"payload":[` + strings.Repeat(`{"after":null},`, 200) + `{"after":null}],"length":201}`, status: 413},
		{name: "empty batch", auth: token, body: `{"payload":[],"length":0}`, status: 200},
		{name: "pending row", auth: token, body: `{"payload":[` + row("RECEIVED", "") + `],"length":1}`, status: 200, processed: 1},
		{name: "due FAILED row", auth: token, body: `{"payload":[` + row("FAILED", past) + `],"length":1}`, status: 200, processed: 1},
		{name: "rows that are not work", auth: token,
			body:   `{"payload":[{"after":null},` + row("PROCESSED", "") + `,` + row("DEAD", "") + `,` + row("REJECTED", "") + `,` + row("FAILED", future) + `,7,{"after":{"id":"zz"}}],"length":7}`,
			status: 200},
		{name: "versions of one row are processed once", auth: token, body: `{"payload":[` + row("RECEIVED", "") + `,` + row("RECEIVED", "") + `],"length":2}`, status: 200, processed: 1},
		{name: "malformed after its rows", auth: token, body: `{"payload":[` + row("RECEIVED", "") + `],"length":1,`, status: 400, errBody: "malformed"},
		{name: "payload twice", auth: token, body: `{"payload":[` + row("RECEIVED", "") + `],"payload":[]}`, status: 400, errBody: "twice"},
		{name: "database down", auth: token, body: `{"payload":[` + row("RECEIVED", "") + `],"length":1}`, procErr: errors.New("connection refused"), status: 503, errBody: "retry", processed: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			proc := &fakeProcessor{err: tt.procErr}
			h := webhook.New(webhook.Config{AuthHeader: token, MaxBodyBytes: 2048}, proc, nil, metrics.New(), nil)
			url, client := serve(t, h)
			var body io.Reader = strings.NewReader(tt.body)
			if tt.chunked {
				body = hiddenLength{body}
			}
			req, _ := http.NewRequest(http.MethodPost, url, body)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status = %d (%s), want %d", resp.StatusCode, got, tt.status)
			}
			if resp.StatusCode >= 300 {
				var e struct{ Error string }
				if err := json.Unmarshal(got, &e); err != nil || e.Error == "" || !strings.Contains(e.Error, tt.errBody) {
					t.Errorf("body = %s, want {\"error\": ...%s...}", got, tt.errBody)
				}
			}
			if len(proc.items) != tt.processed {
				t.Errorf("processor got %d items, want %d", len(proc.items), tt.processed)
			}
		})
	}
}

func TestResolvedWatermark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	m := metrics.New()
	h := webhook.New(webhook.Config{AuthHeader: token, Sink: "journal"}, &fakeProcessor{}, db.Pool, m, nil)
	url, client := serve(t, h)
	sink := &sinktest.Sink{URLs: []string{url}, Client: client, AuthHeader: token}

	if _, found, err := webhook.ReadWatermark(ctx, db.Pool, "journal"); err != nil || found {
		t.Fatalf("watermark before any resolved: found=%v, %v", found, err)
	}
	now := time.Now().Add(-2 * time.Second).UnixNano()
	later := webhook.HLC{WallTime: now, Logical: 3}
	earlier := webhook.HLC{WallTime: now, Logical: 1}
	for _, ts := range []webhook.HLC{earlier, later, earlier} { // a late, replayed resolved message
		if err := sink.Resolved(ctx, ts); err != nil {
			t.Fatal(err)
		}
	}
	w, found, err := webhook.ReadWatermark(ctx, db.Pool, "journal")
	if err != nil || !found || w.Resolved != later {
		t.Fatalf("watermark = %+v, %v, %v; want %s (never backwards)", w, found, err, later)
	}
	if h.Resolved() != later {
		t.Errorf("handler's resolved = %s, want %s", h.Resolved(), later)
	}
	if v := gauge(t, m, "inboxd_feed_resolved_timestamp_seconds"); v != float64(now)/1e9 {
		t.Errorf("resolved gauge = %v, want %v", v, float64(now)/1e9)
	}
	if v := gauge(t, m, "inboxd_feed_watermark_lag_seconds"); v < 1 || v > 60 {
		t.Errorf("lag gauge = %v, want about 2s", v)
	}
	// Bare envelope resolved message.
	newer := webhook.HLC{WallTime: now + 1}
	status, body, err := sink.Post(ctx, url, []byte(`{"__crdb__":{"resolved":"`+newer.String()+`"}}`))
	if err != nil || status != 200 {
		t.Fatalf("bare resolved: %d %s %v", status, body, err)
	}
	if w, _, _ := webhook.ReadWatermark(ctx, db.Pool, "journal"); w.Resolved != newer {
		t.Errorf("watermark = %s, want %s", w.Resolved, newer)
	}
	// Database gone: 5xx, so the sink retries.
	db.Pool.Close()
	if status, _, _ := sink.Post(ctx, url, []byte(`{"resolved":"`+webhook.HLC{WallTime: now + 2}.String()+`"}`)); status < 500 {
		t.Errorf("status with the database closed = %d, want 5xx", status)
	}
}

func gauge(t *testing.T, m *metrics.Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var sum float64
			for _, mt := range mf.GetMetric() {
				if mt.Gauge != nil {
					sum += mt.Gauge.GetValue()
				}
				if mt.Counter != nil {
					sum += mt.Counter.GetValue()
				}
			}
			return sum
		}
	}
	return 0
}

// Pending rows over Config.MaxPendingRows are not processed by the handler but left to
// the sweeper, and the batch is still answered 200: a 4xx would be retried forever.
func TestPendingRowsOverTheLimit(t *testing.T) {
	t.Parallel()
	proc := &fakeProcessor{}
	h := webhook.New(webhook.Config{AuthHeader: token, MaxPendingRows: 2}, proc, nil, metrics.New(), nil)
	url, client := serve(t, h)
	var rows []string
	for i := range 5 {
		id := fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
		rows = append(rows, `{"after":{"id":"`+id+`","status":"RECEIVED"}}`)
	}
	rows = append(rows, rows[0], `{"after":null}`) // a second version of a processed row, a delete
	code, body := post(t, client, url, []byte(`{"payload":[`+strings.Join(rows, ",")+`],"length":7}`))
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var counts map[string]int
	if err := json.Unmarshal([]byte(body), &counts); err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"processed": 2, "over_limit": 3, "ignored": 2}; !maps.Equal(counts, want) {
		t.Errorf("counts = %v, want %v", counts, want)
	}
	if len(proc.items) != 2 {
		t.Errorf("processor got %d items, want 2", len(proc.items))
	}
}
