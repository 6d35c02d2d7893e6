package webhook_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/webhook"
)

// worstRow is a journal row as the changefeed sends it for a message of exactly
// maxMessageBytes whose text is all <, > and & (six bytes each once encoded), with
// event_type and aggregate_id taken from the payload, so the body's text appears twice.
func worstRow(t *testing.T, n, maxMessageBytes int) (row []byte, raw int) {
	id := fmt.Sprintf("00000000-0000-4000-8000-%012d", n)
	skeleton := fmt.Sprintf(`{"id":%q,"type":"","aggregateId":"","data":""}`, id)
	free := maxMessageBytes - len(skeleton)
	typ, agg := strings.Repeat("<", free/4), strings.Repeat("&", free/4)
	data := strings.Repeat(">", free-len(typ)-len(agg))
	payload := map[string]string{"id": id, "type": typ, "aggregateId": agg, "data": data}
	p, _ := json.Marshal(payload)
	if got := len(bytes.ReplaceAll(bytes.ReplaceAll(bytes.ReplaceAll(p, []byte(`\u003c`), []byte("<")), []byte(`\u003e`), []byte(">")), []byte(`\u0026`), []byte("&"))); got != maxMessageBytes {
		t.Fatalf("message is %d bytes, want %d", got, maxMessageBytes)
	}
	after := map[string]any{
		"id": id, "payload": payload, "event_type": typ, "aggregate_id": agg, "sequence_no": n,
		"tag": "/queue/registrations", "status": "RECEIVED", "attempts": 0, "last_error": strings.Repeat("&", 4000),
		"next_attempt_at": "2026-11-23T06:53:00.123456Z", "received_at": "2026-11-23T06:53:00.123456Z",
		"updated_at": "2026-11-23T06:53:00.123456Z", "processed_at": nil,
	}
	row, err := json.Marshal(map[string]any{"after": after, "updated": "1629813621680097993.0000000000"})
	if err != nil {
		t.Fatal(err)
	}
	return row, maxMessageBytes*2 + 4000 + 300
}

// TestLargestBatchFitsBodyCap builds the largest batch the sink can send with the
// Flush.Bytes that "inboxd changefeed create" sets, from messages of the largest
// allowed size made of characters the encoder escapes to six bytes, and posts it to a
// handler with the default body cap: it must be accepted, not refused with 413 (which
// the sink would retry forever). The sink flushes once a batch reaches Flush.Bytes, so
// the row that crosses it is in the batch; both ways of counting (encoded or raw bytes)
// are tried.
func TestLargestBatchFitsBodyCap(t *testing.T) {
	t.Parallel()
	flush := feed.DefaultOptions("webhook-https://x/y", "", "").Flush
	if flush.Bytes <= 0 {
		t.Fatal("DefaultOptions sets no Flush.Bytes: a batch of large rows has no bound")
	}
	max := message.DefaultMaxBodyBytes
	for _, counting := range []string{"encoded", "raw"} {
		t.Run(counting, func(t *testing.T) {
			var rows [][]byte
			counted := 0
			for n := 1; counted < flush.Bytes && len(rows) < flush.Messages; n++ {
				row, raw := worstRow(t, n, max)
				rows = append(rows, row)
				if counting == "encoded" {
					counted += len(row)
				} else {
					counted += raw
				}
			}
			body := []byte(`{"payload":[` + string(bytes.Join(rows, []byte(","))) + fmt.Sprintf(`],"length":%d}`, len(rows)))
			t.Logf("%d rows, body %d bytes, cap %d bytes (flush bytes %d, max message %d)",
				len(rows), len(body), webhook.DefaultMaxBodyBytes, flush.Bytes, max)
			if int64(len(body)) > webhook.DefaultMaxBodyBytes {
				t.Fatalf("batch of %d bytes exceeds the body cap %d", len(body), webhook.DefaultMaxBodyBytes)
			}
			proc := &fakeProcessor{}
			h := webhook.New(webhook.Config{AuthHeader: token}, proc, nil, metrics.New(), nil)
			url, client := serve(t, h)
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			req.Header.Set("Authorization", token)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status = %d (%s), want 200", resp.StatusCode, got)
			}
			if len(proc.items) != len(rows) {
				t.Errorf("processor got %d items, want %d", len(proc.items), len(rows))
			}
		})
	}
}

// TestBodyCapFollowsMessageSize: a larger INBOXD_MAX_BODY_BYTES raises the cap with it.
func TestBodyCapFollowsMessageSize(t *testing.T) {
	t.Parallel()
	small, large := webhook.MaxBodyBytes(1<<10), webhook.MaxBodyBytes(1<<20)
	if large-small < 12*((1<<20)-(1<<10)) {
		t.Errorf("cap grows by %d for %d more message bytes, want at least 12× (escaping, body text twice)", large-small, (1<<20)-(1<<10))
	}
}
