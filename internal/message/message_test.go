package message

import (
	"cmp"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func noHeaders(string) string { return "" }

func TestDecode(t *testing.T) {
	const id = "6F1C1F0E-1C3A-4C55-9A65-8B7E2D1F0A01"
	tests := []struct {
		name       string
		body       string
		headers    map[string]string
		maxBody    int
		wantReason Reason
		wantType   string
		wantAgg    string
	}{
		{name: "valid", body: `{"id":"` + id + `"}`, wantType: "default", wantAgg: strings.ToLower(id)},
		{name: "braced id", body: `{"id":"{` + id + `}"}`, wantType: "default", wantAgg: strings.ToLower(id)},
		{name: "type from payload", body: `{"id":"` + id + `","type":"t1","aggregateId":"a1"}`, wantType: "t1", wantAgg: "a1"},
		{name: "type from header wins", body: `{"id":"` + id + `","type":"t1"}`, headers: map[string]string{HeaderEventType: "h1", HeaderAggregateID: "ha"}, wantType: "h1", wantAgg: "ha"},
		{name: "not json", body: `hello`, wantReason: ReasonNotJSON},
		{name: "truncated json", body: `{"id":`, wantReason: ReasonNotJSON},
		{name: "empty body", body: ``, wantReason: ReasonNotJSON},
		{name: "invalid utf8", body: "{\"id\":\"\xff\"}", wantReason: ReasonNotJSON},
		{name: "nul escape", body: `{"id":"` + id + `","x":"\u0000"}`, wantReason: ReasonNotJSON},
		{name: "nul escape in a key", body: `{"id":"` + id + `","a\u0000":1}`, wantReason: ReasonNotJSON},
		{name: "escaped backslash before u0000 is fine", body: `{"id":"` + id + `","path":"C:\\u0000"}`, wantType: "default", wantAgg: strings.ToLower(id)},
		{name: "NUL in event-type header", body: `{"id":"` + id + `"}`, headers: map[string]string{HeaderEventType: "a\x00b"}, wantReason: ReasonInvalidHeader},
		{name: "invalid UTF-8 in aggregate-id header", body: `{"id":"` + id + `"}`, headers: map[string]string{HeaderAggregateID: "\xff"}, wantReason: ReasonInvalidHeader},
		{name: "4KB aggregateId in the payload", body: `{"id":"` + id + `","aggregateId":"` + strings.Repeat("a", 4000) + `"}`, maxBody: 8192, wantReason: ReasonInvalidField},
		{name: "4KB type in the payload", body: `{"id":"` + id + `","type":"` + strings.Repeat("t", 4000) + `"}`, maxBody: 8192, wantReason: ReasonInvalidField},
		{name: "huge event-type header", body: `{"id":"` + id + `"}`, headers: map[string]string{HeaderEventType: strings.Repeat("t", 300)}, wantReason: ReasonInvalidHeader},
		{name: "array", body: `[1,2]`, wantReason: ReasonNotObject},
		{name: "null", body: `null`, wantReason: ReasonNotObject},
		{name: "missing id", body: `{"name":"x"}`, wantReason: ReasonMissingID},
		{name: "numeric id", body: `{"id":42}`, wantReason: ReasonInvalidID},
		{name: "empty id", body: `{"id":""}`, wantReason: ReasonInvalidID},
		{name: "2 KB id", body: `{"id":"` + strings.Repeat("i", 2000) + `"}`, maxBody: 4096, wantReason: ReasonInvalidID},
		{name: "too large", body: `{"id":"` + id + `","pad":"` + strings.Repeat("x", 300) + `"}`, wantReason: ReasonTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := func(k string) string { return tt.headers[k] }
			ev, err := Decode([]byte(tt.body), header, Options{MaxBodyBytes: cmp.Or(tt.maxBody, 256), DefaultEventType: "default"})
			if tt.wantReason != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Reason != tt.wantReason {
					t.Fatalf("err = %v, want reason %s", err, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if ev.ID != strings.ToLower(id) || ev.EventType != tt.wantType || ev.AggregateID != tt.wantAgg {
				t.Errorf("got %+v", ev)
			}
		})
	}
}

func TestQuarantineIDIsStableUUID(t *testing.T) {
	a := QuarantineID(ReasonNotJSON, "/queue/a", []byte("x"))
	if a != QuarantineID(ReasonNotJSON, "/queue/a", []byte("x")) {
		t.Fatal("not deterministic")
	}
	if a == QuarantineID(ReasonNotJSON, "/queue/b", []byte("x")) {
		t.Fatal("destination ignored")
	}
	if _, ok := CanonicalUUID(a); !ok {
		t.Fatalf("%q is not a UUID", a)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"}`, `{"id":1}`, `[]`, `null`, `{"id":"{6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01}","type":"x"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := Decode(body, noHeaders, Options{DefaultEventType: "d"})
		if err != nil {
			var inv *Invalid
			if !errors.As(err, &inv) || inv.Reason == "" {
				t.Fatalf("error without reason: %v", err)
			}
			return
		}
		if c, ok := CanonicalUUID(ev.ID); !ok || c != ev.ID {
			t.Fatalf("accepted id %q is not canonical", ev.ID)
		}
		if ev.EventType == "" || ev.AggregateID == "" {
			t.Fatalf("accepted event lacks type or aggregate: %+v", ev)
		}
	})
}

func TestTruncateKeepsUTF8(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"aé", 2, "a…"}, // é is 2 bytes: not cut in half
		{"日本語", 4, "日…"},
	} {
		if got := Truncate(tc.in, tc.n); got != tc.want || !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// With no default event type, a message that names none is quarantined: no handler
// could ever be chosen for it, and a journal entry of type "" would only die later.
func TestMissingType(t *testing.T) {
	id := "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"
	tests := []struct {
		name    string
		body    string
		headers map[string]string
		want    Reason // "" means journaled
	}{
		{"no type anywhere", `{"id":"` + id + `"}`, nil, ReasonMissingType},
		{"empty type field", `{"id":"` + id + `","type":""}`, nil, ReasonMissingType},
		{"type not a string", `{"id":"` + id + `","type":5}`, nil, ReasonMissingType},
		{"type field", `{"id":"` + id + `","type":"t"}`, nil, ""},
		{"event-type header", `{"id":"` + id + `"}`, map[string]string{HeaderEventType: "h"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode([]byte(tt.body), func(k string) string { return tt.headers[k] }, Options{})
			var inv *Invalid
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("err = %v, want none", err)
			case tt.want != "" && (!errors.As(err, &inv) || inv.Reason != tt.want):
				t.Fatalf("err = %v, want reason %s", err, tt.want)
			}
		})
	}
}
