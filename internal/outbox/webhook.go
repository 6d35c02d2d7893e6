package outbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/inboxd/inboxd/internal/httpsec"
	"github.com/inboxd/inboxd/internal/message"
)

// MaxWebhookBody bounds one request of the outbox feed. Its rows carry an id only.
const MaxWebhookBody = 4 << 20

// Waker is what the webhook needs of the relay.
type Waker interface{ Wake() }

// WebhookHandler serves the CockroachDB changefeed of the outbox table
// (feed.BuildOutboxCreate): every batch of new unsent rows wakes the relay, which
// claims and publishes due rows as on any pass. It answers 2xx once the body is a
// valid changefeed message: the rows are already durable in the outbox, and answering
// with an error would only make the feed resend the batch and block behind it; if the
// broker is down, the relay's retries and poll take over. authHeader, when not empty,
// must match the Authorization header exactly; it is compared as the journal's webhook
// compares it (httpsec.Secret: hashes, so that its length does not leak either).
func WebhookHandler(w Waker, authHeader string) http.Handler {
	auth := httpsec.NewSecret(authHeader)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeJSON(rw, http.StatusMethodNotAllowed, map[string]string{"error": "POST only"})
			return
		}
		if authHeader != "" && !auth.Matches(r.Header.Get("Authorization")) {
			writeJSON(rw, http.StatusUnauthorized, map[string]string{"error": "missing or wrong Authorization header"})
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, MaxWebhookBody))
		if err != nil {
			writeJSON(rw, http.StatusRequestEntityTooLarge, map[string]string{"error": "body too large or unreadable"})
			return
		}
		rows, err := DecodeFeedBody(body)
		if err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		if rows > 0 {
			w.Wake()
		}
		writeJSON(rw, http.StatusOK, map[string]int{"rows": rows})
	})
}

// ErrFeedBody wraps every error of DecodeFeedBody.
var ErrFeedBody = errors.New("not a changefeed message")

// DecodeFeedBody checks a webhook body of the outbox feed and returns how many rows it
// announces: {"payload":[{"after":{"id":…},…}],"length":N}, or {"resolved":"…"} (0).
// A row whose id is not a UUID is ignored, not fatal: one odd row must not block the feed.
func DecodeFeedBody(body []byte) (int, error) {
	var env struct {
		Payload  []json.RawMessage `json:"payload"`
		Length   *int              `json:"length"`
		Resolved *string           `json:"resolved"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&env); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrFeedBody, err)
	}
	if dec.More() {
		return 0, fmt.Errorf("%w: trailing data", ErrFeedBody)
	}
	switch {
	case env.Resolved != nil && env.Payload == nil:
		return 0, nil
	case env.Payload == nil || env.Length == nil:
		return 0, fmt.Errorf("%w: want payload and length, or resolved", ErrFeedBody)
	case *env.Length != len(env.Payload):
		return 0, fmt.Errorf("%w: length %d but %d rows", ErrFeedBody, *env.Length, len(env.Payload))
	}
	n := 0
	for _, raw := range env.Payload {
		var row struct {
			After *struct {
				ID string `json:"id"`
			} `json:"after"`
		}
		if json.Unmarshal(raw, &row) != nil || row.After == nil {
			continue
		}
		if _, ok := message.CanonicalUUID(row.After.ID); ok {
			n++
		}
	}
	return n, nil
}

func writeJSON(rw http.ResponseWriter, status int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(v)
}
