package outbox

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

type countWaker struct{ n atomic.Int32 }

func (c *countWaker) Wake() { c.n.Add(1) }

func TestWebhookHandler(t *testing.T) {
	t.Parallel()
	id := "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"
	tests := []struct {
		name, method, auth, body string
		status                   int
		wakes                    int32
	}{
		{"rows", "POST", "Bearer s", `{"payload":[{"after":{"id":"` + id + `"},"updated":"1.0"}],"length":1}`, 200, 1},
		{"resolved", "POST", "Bearer s", `{"resolved":"1629813621680097993.0000000000"}`, 200, 0},
		{"odd row ignored", "POST", "Bearer s", `{"payload":[{"after":{"id":"x"}},{"after":null}],"length":2}`, 200, 0},
		{"wrong token", "POST", "Bearer x", `{"resolved":"1"}`, 401, 0},
		{"no token", "POST", "", `{"resolved":"1"}`, 401, 0},
		{"GET", "GET", "Bearer s", ``, 405, 0},
		{"not JSON", "POST", "Bearer s", `nope`, 400, 0},
		{"length mismatch", "POST", "Bearer s", `{"payload":[],"length":3}`, 400, 0},
		{"trailing", "POST", "Bearer s", `{"resolved":"1"} {}`, 400, 0},
		{"too large", "POST", "Bearer s", `{"resolved":"` + strings.Repeat("1", MaxWebhookBody) + `"}`, 413, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &countWaker{}
			h := WebhookHandler(w, "Bearer s")
			req := httptest.NewRequest(tt.method, "/changefeed/outbox", strings.NewReader(tt.body))
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tt.status || w.n.Load() != tt.wakes {
				t.Errorf("status %d wakes %d, want %d and %d; body %s", rec.Code, w.n.Load(), tt.status, tt.wakes, rec.Body)
			}
		})
	}
}

func FuzzDecodeFeedBody(f *testing.F) {
	f.Add([]byte(`{"payload":[{"after":{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"}}],"length":1}`))
	f.Add([]byte(`{"resolved":"1.0"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeFeedBody(b)
		if err == nil && (n < 0 || n > len(b)) {
			t.Fatalf("%d rows from %d bytes", n, len(b))
		}
	})
}

var _ http.Handler = WebhookHandler(&countWaker{}, "")
