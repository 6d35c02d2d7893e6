package journal

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/sqlbound"
)

// FuzzBoundBad: whatever a bad message carries (headers, body, detail, ids), its bounded
// quarantine row fits one statement of the minimum bound, its headers' JSON is what
// badBytes counts, and a cut body says so at the start of detail.
func FuzzBoundBad(f *testing.F) {
	f.Add("k", strings.Repeat("v", 70<<10), 3, []byte("body"), "detail", "/queue/q", "id-1", 2<<20)
	f.Add("\x00\xff", "\u2028<>&", 2000, []byte{0xff}, "\x00", "", "", 1<<20)
	f.Fuzz(func(t *testing.T, key, value string, copies int, body []byte, detail, dest, msgID string, bodyLen int) {
		if copies < 0 || copies > 3000 || bodyLen < 0 || bodyLen > 4<<20 {
			return
		}
		h := map[string]string{}
		for i := range copies {
			h[key+strings.Repeat("k", i%7)+string(rune('a'+i%26))+strings.Repeat("x", i%50)] = value
		}
		full := make([]byte, 0, bodyLen+len(body))
		for len(full) < bodyLen {
			full = append(full, body...)
			if len(body) == 0 {
				full = append(full, 'b')
			}
		}
		in := Bad{Reason: message.ReasonTooLarge, Detail: detail, Destination: dest, MessageID: msgID, Headers: h, Body: full}
		max := sqlbound.MinMaxStatementBytes
		b := boundBad(in, MaxQuarantineBody(max))
		if got := ingestBase + badBytes(b); got > max {
			t.Fatalf("bounded row is %d bytes, over %d", got, max)
		}
		j, err := json.Marshal(b.Headers)
		if err != nil || len(j) != b.headerBytes || len(j) > maxQuarantineHeaders {
			t.Fatalf("headers JSON %d bytes, counted %d, cap %d (%v)", len(j), b.headerBytes, maxQuarantineHeaders, err)
		}
		if cut := len(b.Body) < len(full); cut != bodyTruncated(b.Detail) {
			t.Fatalf("body %d of %d bytes, detail %.80q", len(b.Body), len(full), b.Detail)
		}
		if b.id != message.QuarantineID(in.Reason, in.Destination, in.Body) {
			t.Fatal("quarantine id not from the message as received")
		}
	})
}
