package api

import (
	"encoding/json"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/inboxd/inboxd/internal/journal"
)

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 31, 12, 0, 0, 123456000, time.UTC)
	for _, c := range []cursor{
		{Kind: cursorJournal, Seq: 1},
		{Kind: cursorJournal, Desc: true, Seq: 1 << 60},
		{Kind: cursorQuarantine, At: &at, ID: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"},
	} {
		got, err := decodeCursor(encodeCursor(c))
		if err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v: %+v, %v", c, got, err)
		}
	}
	for _, bad := range []string{"", "!", "e30", encodeCursor(cursor{Kind: "j"}), encodeCursor(cursor{Kind: "q", ID: "x", At: &at}),
		encodeCursor(cursor{Kind: "x", Seq: 1}), encodeCursor(cursor{Kind: "j", Seq: -1})} {
		if _, err := decodeCursor(bad); err == nil {
			t.Errorf("decodeCursor(%q) accepted", bad)
		}
	}
}

func FuzzDecodeCursor(f *testing.F) {
	at := time.Date(2025, 1, 31, 12, 0, 0, 0, time.UTC)
	f.Add(encodeCursor(cursor{Kind: cursorJournal, Seq: 42}))
	f.Add(encodeCursor(cursor{Kind: cursorQuarantine, Desc: true, At: &at, ID: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"}))
	f.Add("eyJrIjoiaiIsInMiOjF9")
	f.Add("")
	f.Add("====")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			return
		}
		// Whatever decodes re-encodes to something that decodes to the same position.
		again, err := decodeCursor(encodeCursor(c))
		if err != nil {
			t.Fatalf("re-encoded cursor %+v refused: %v", c, err)
		}
		if again.Kind != c.Kind || again.Seq != c.Seq || again.Desc != c.Desc || again.ID != c.ID ||
			(c.At == nil) != (again.At == nil) || (c.At != nil && !c.At.Equal(*again.At)) {
			t.Fatalf("round trip changed %+v into %+v", c, again)
		}
		if c.Kind == cursorJournal && c.Seq <= 0 {
			t.Fatalf("accepted journal cursor with seq %d", c.Seq)
		}
	})
}

var surrogateEscape = regexp.MustCompile(`(^|[^\\])(\\\\)*\\u[dD][89a-fA-F]`)

// checkFilter asserts what the database relies on for any accepted filter.
func checkFilter(t *testing.T, f journal.Filter) {
	t.Helper()
	if len(f.Contains) > 0 {
		var obj map[string]any
		if err := json.Unmarshal(f.Contains, &obj); err != nil || obj == nil {
			t.Fatalf("containment %q is not a JSON object: %v", f.Contains, err)
		}
		// What PostgreSQL's jsonb refuses: invalid UTF-8, NUL, lone surrogates.
		if !utf8.Valid(f.Contains) || nulEscape.Match(f.Contains) || surrogateEscape.Match(f.Contains) {
			t.Fatalf("containment %q would be refused by jsonb", f.Contains)
		}
	}
	for _, s := range f.Statuses {
		if !s.Valid() {
			t.Fatalf("accepted status %q", s)
		}
	}
	if !validText(f.EventType) {
		t.Fatalf("accepted type %q", f.EventType)
	}
}

func FuzzParseEventQuery(f *testing.F) {
	for _, s := range []string{
		"", "jurisdiction=mga", "status=DEAD,failed&since=2025-01-01T00:00:00Z&limit=10&order=asc",
		"address.country=mt&address.city=valletta", "a=1&a.b=2", "type=registration&x=%ff", "cursor=eyJrIjoiaiIsInMiOjF9&order=asc",
		"a.b.c.d.e.f.g.h.i=1", ".=x", "limit=-1",
	} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, raw string, admin bool) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		var allowed []journal.Status
		if admin {
			allowed = journal.RetryableStatuses
		}
		eq, err := parseEventQuery(q, allowed, admin)
		if err != nil {
			if _, ok := err.(*httpError); !ok {
				t.Fatalf("error %T is not an httpError", err)
			}
			return
		}
		checkFilter(t, eq.Filter)
		if admin {
			for _, s := range eq.Filter.Statuses {
				if !slices.Contains(journal.RetryableStatuses, s) {
					t.Fatalf("admin listing accepted status %s", s)
				}
			}
		}
		if eq.Page.Limit < 1 || eq.Page.Limit > MaxLimit {
			t.Fatalf("limit %d", eq.Page.Limit)
		}
	})
}

func FuzzParseFilterBody(f *testing.F) {
	for _, s := range []string{
		``, `{}`, `{"status":"DEAD"}`, `{"status":["DEAD","FAILED"],"type":"registration","payload":{"a":{"b":1}},"since":"2025-01-01T00:00:00Z","dry_run":true}`,
		`{"payload":null}`, `{"payload":[]}`, `{"status":5}`, `[]`, `{"type":"\u0000"}`, `{"payload":{"a":"\ud800"}}`, "{\"payload\":{\"a\":\"\xff\"}}", `{"payload":{"n":1.50}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fl, _, err := parseFilterBody(body, nil)
		if err != nil {
			return
		}
		checkFilter(t, fl)
	})
}
