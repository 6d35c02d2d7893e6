package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/webhook"
)

// heapProcessor counts the items it is given and, when measure is set, records the
// live heap at the moment the handler hands its batch over: everything the handler
// still holds then is what a batch costs while it is processed.
type heapProcessor struct {
	measure bool
	mu      sync.Mutex
	items   int
	heap    uint64
}

func (p *heapProcessor) ProcessBatch(_ context.Context, items []process.Item) ([]process.Outcome, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.items += len(items)
	if p.measure {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p.heap = ms.HeapAlloc
	}
	return make([]process.Outcome, len(items)), nil
}

// fillBatch builds {"payload":[...],"length":N} of at most size bytes and maxRows rows
// from rows taken in turn from rows.
func fillBatch(size int64, maxRows int, rows ...func(i int) string) (body []byte, n int) {
	var b bytes.Buffer
	b.WriteString(`{"payload":[`)
	const tail = len(`],"length":9999999}`)
	for ; n < maxRows; n++ {
		r := rows[n%len(rows)](n)
		if int64(b.Len()+1+len(r)+tail) > size {
			break
		}
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(r)
	}
	fmt.Fprintf(&b, `],"length":%d}`, n)
	return b.Bytes(), n
}

func rowID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }

func constRow(s string) func(int) string { return func(int) string { return s } }

// minimalPending is the smallest row that is work: an id and nothing else (a CDC query
// may project only the id; an unknown status is treated as pending).
func minimalPending(i int) string { return `{"after":{"id":"` + rowID(i) + `"}}` }

// hostileBodies are batches of size bytes made of the rows that cost the decoder the
// most per byte. want is the answer's counts, "pending" the rows that are work (over
// MaxPendingRows, they are counted as over_limit instead of processed).
func hostileBodies(size int64) []struct {
	name string
	body []byte
	rows int
	want map[string]int
} {
	type body = struct {
		name string
		body []byte
		rows int
		want map[string]int
	}
	var out []body
	add := func(name string, want func(n int) map[string]int, rows ...func(int) string) {
		b, n := fillBatch(size, 1<<30, rows...)
		out = append(out, body{name, b, n, want(n)})
	}
	add("empty objects", func(n int) map[string]int { return map[string]int{"poison": n} }, constRow(`{}`))
	add("deletes", func(n int) map[string]int { return map[string]int{"ignored": n} }, constRow(`{"after":null}`))
	add("escaped deletes", func(n int) map[string]int { return map[string]int{"ignored": n} }, constRow(`{"\u0061fter":null,"\u006Bey":["\ud800"]}`))
	add("ids not UUIDs", func(n int) map[string]int { return map[string]int{"poison": n} }, constRow(`{"after":{"id":"zz"}}`))
	add("ids not strings", func(n int) map[string]int { return map[string]int{"poison": n} }, constRow(`{"after":{"id":7}}`))
	add("bare rows, ids not UUIDs", func(n int) map[string]int { return map[string]int{"poison": n} }, constRow(`{"__crdb__":{"key":["x"]}}`))
	// Per 8 rows: 2 pending, 6 garbage of every kind (not an object, no envelope,
	// "after" not an object, id not a UUID, a delete, a terminal status).
	garbage := []func(int) string{minimalPending, constRow(`7`), constRow(`{}`), constRow(`{"after":"x"}`),
		minimalPending, constRow(`{"after":{"id":"zz"}}`), constRow(`{"after":null}`),
		func(i int) string { return `{"after":{"id":"` + rowID(i) + `","status":"PROCESSED"}}` }}
	add("pending rows mixed with garbage", func(n int) map[string]int {
		pending := n/8*2 + min(n%8, 1) + min(max(n%8-4, 0), 1)
		ignored := n/8*2 + min(max(n%8-6, 0), 2)
		return map[string]int{"processed": 0, "poison": n - pending - ignored, "ignored": ignored, "pending": pending}
	}, garbage...)
	add("all minimal pending rows", func(n int) map[string]int { return map[string]int{"pending": n} }, minimalPending)
	return out
}

// TestHostileBodyMemory posts batches at the default body cap (about 9.5 MB) made of
// tiny rows, up to three million of them, and bounds what one such request costs: the
// bytes it allocates in all (TotalAlloc), and the heap still live when the batch is
// handed to the processor (what each concurrent request holds while its rows are
// processed).
//
// When the body was read whole and every row decoded into a Row before any was looked
// at, the body of {} rows allocated 158 bytes per body byte (1.5 GB) and held 279 MB
// at processing; its peak RSS was 780 MB. Now the rows are streamed and only pending
// items are kept. The bounds, from measurements with room to spare (numbers logged):
//   - allocated, rows that are not work: at most 2 bytes per body byte (measured 0.001
//     for {} and deletes, 0.4 at most, for rows whose key is copied into Row.Key).
//   - allocated, with pending rows: at most 15 per body byte (measured 3.7 with the
//     default MaxPendingRows, 12.2 without a limit: each pending row allocates its
//     JournalRow and id, each processed one an item and a set entry).
//   - live at processing: 1 MB plus 250 bytes per processed row (measured: below the
//     heap before the request for rows that are not work, 131 bytes per processed row).
func TestHostileBodyMemory(t *testing.T) {
	size := webhook.DefaultMaxBodyBytes
	if raceEnabled {
		// The race detector makes each row take microseconds; the bounds are per byte
		// and per row, not per body, so a smaller body checks the same thing.
		size /= 16
	}
	type hostileCase struct {
		name       string
		body       []byte
		rows       int
		want       map[string]int
		maxPending int
	}
	var cases []hostileCase
	for _, hb := range hostileBodies(size) {
		cases = append(cases, hostileCase{hb.name, hb.body, hb.rows, hb.want, 0})
		if hb.name == "all minimal pending rows" {
			// What each pending row costs, and so what the limit saves.
			cases = append(cases, hostileCase{hb.name + ", no pending limit", hb.body, hb.rows, hb.want, 1 << 30})
		}
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			proc := &heapProcessor{measure: true}
			h := webhook.New(webhook.Config{AuthHeader: token, MaxPendingRows: tt.maxPending}, proc, nil, metrics.New(), nil)
			e := echo.New()
			h.Register(e, "/changefeed")

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			req := httptest.NewRequest(http.MethodPost, "/changefeed", bytes.NewReader(tt.body))
			req.Header.Set("Authorization", token)
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			runtime.ReadMemStats(&after)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %.300s", rec.Code, rec.Body)
			}

			limit := tt.maxPending
			if limit == 0 {
				limit = webhook.DefaultMaxPendingRows
			}
			want := map[string]int{}
			for k, n := range tt.want {
				want[k] = n
			}
			pending := want["pending"]
			delete(want, "pending")
			work := min(pending, limit)
			want["over_limit"] = pending - work
			var counts map[string]int
			if err := json.Unmarshal(rec.Body.Bytes(), &counts); err != nil {
				t.Fatal(err)
			}
			for k, n := range want {
				if counts[k] != n {
					t.Errorf("counts = %v, want %s = %d", counts, k, n)
				}
			}
			if proc.items != work {
				t.Errorf("processor got %d items, want %d", proc.items, work)
			}

			allocated := after.TotalAlloc - before.TotalAlloc
			live := int64(proc.heap) - int64(before.HeapAlloc)
			perByte := float64(allocated) / float64(len(tt.body))
			t.Logf("%d rows, %d pending, %d processed, in %d bytes: allocated %d kB (%.3f B per body byte), live at processing %d kB (%.0f B per processed row)",
				tt.rows, pending, work, len(tt.body), allocated>>10, perByte, live>>10, float64(live)/float64(max(work, 1)))
			maxPerByte := 2.0
			if pending > 0 {
				maxPerByte = 15
			}
			if perByte > maxPerByte {
				t.Errorf("allocated %.2f bytes per body byte, want at most %.0f", perByte, maxPerByte)
			}
			if maxLive := int64(1<<20 + 250*work); live > maxLive {
				t.Errorf("%d bytes live when the batch is processed, want at most %d (1 MB + 250 per processed row): rows that are not work are kept", live, maxLive)
			}
		})
	}
}

// BenchmarkHandle posts one batch per iteration straight to the handler: the hostile
// ones at the body cap and a realistic one of 1000 journal rows, to compare the bytes
// each allocates per request (B/op) and per body byte (alloc-B/body-B).
//
//	go test -run '^$' -bench BenchmarkHandle -benchtime 3x ./webhook/
func BenchmarkHandle(b *testing.B) {
	type body struct {
		name string
		body []byte
	}
	var bodies []body
	for _, hb := range hostileBodies(webhook.DefaultMaxBodyBytes) {
		bodies = append(bodies, body{"hostile " + hb.name, hb.body})
	}
	realistic, n := fillBatch(1<<30, 1000, func(i int) string {
		after := fmt.Sprintf(`{"id":%q,"payload":{"id":%q,"type":"registration","aggregateId":"user-%d","data":%q},"event_type":"registration","aggregate_id":"user-%d","sequence_no":%d,"tag":"/queue/registrations","status":"RECEIVED","attempts":0,"last_error":null,"next_attempt_at":"2026-11-23T06:53:00.123456Z","received_at":"2026-11-23T06:53:00.123456Z","updated_at":"2026-11-23T06:53:00.123456Z","processed_at":null}`,
			rowID(i), rowID(i), i%97, strings.Repeat("x", 300), i%97, i)
		return fmt.Sprintf(`{"after":%s,"key":[%q],"topic":"journal","updated":"1629813621680097993.%010d"}`, after, rowID(i), i)
	})
	if n != 1000 {
		b.Fatalf("realistic batch has %d rows", n)
	}
	bodies = append(bodies, body{"realistic 1000 rows", realistic})
	for _, bb := range bodies {
		name, body := bb.name, bb.body
		b.Run(name, func(b *testing.B) {
			h := webhook.New(webhook.Config{AuthHeader: token}, &heapProcessor{}, nil, metrics.New(), nil)
			e := echo.New()
			h.Register(e, "/changefeed")
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				req := httptest.NewRequest(http.MethodPost, "/changefeed", bytes.NewReader(body))
				req.Header.Set("Authorization", token)
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("status %d: %.300s", rec.Code, rec.Body)
				}
			}
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N)/float64(len(body)), "alloc-B/body-B")
		})
	}
}
