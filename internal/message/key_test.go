package message

import (
	"errors"
	"testing"
)

// RFC 9562 appendix A.4: the UUIDv5 of "www.example.com" in the DNS namespace.
func TestUUIDv5Vector(t *testing.T) {
	dns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	if got, want := UUIDv5(dns, "www.example.com"), "2ed6657d-e927-568b-95e1-2665a8aea6a2"; got != want {
		t.Fatalf("UUIDv5 = %s, want %s", got, want)
	}
	if KeyNamespace() != "6f1c4b52-9d3e-4a07-b821-5e0a7c943d11" {
		t.Fatalf("the key namespace changed to %s: every non-UUID event would get a new journal id", KeyNamespace())
	}
}

// Issue 22.3: any string id is an event id; a UUID keeps its own value, any other key
// becomes a fixed UUIDv5, and the id's source is configurable.
func TestDecodeAnyID(t *testing.T) {
	const uuid = "6F1C1F0E-1C3A-4C55-9A65-8B7E2D1F0A01"
	evt456 := UUIDv5(keyNamespace, "evt-456")
	tests := []struct {
		name       string
		source     string
		body       string
		headers    map[string]string
		wantID     string
		wantReason Reason
	}{
		{name: "the Kafka seed's evt-456", body: `{"id":"evt-456"}`, wantID: evt456},
		{name: "a UUID keeps its value", body: `{"id":"` + uuid + `"}`, wantID: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"},
		{name: "hex without hyphens is a key like any other", body: `{"id":"6f1c1f0e1c3a4c559a658b7e2d1f0a01"}`, wantID: UUIDv5(keyNamespace, "6f1c1f0e1c3a4c559a658b7e2d1f0a01")},
		{name: "another payload field", source: "payload:eventId", body: `{"id":"x","eventId":"evt-456"}`, wantID: evt456},
		{name: "another payload field, absent", source: "payload:eventId", body: `{"id":"evt-456"}`, wantReason: ReasonMissingID},
		{name: "the JMS message id", source: "header:message-id", body: `{"id":"ignored"}`,
			headers: map[string]string{"message-id": "ID:broker-1-1:1:1:1:1"}, wantID: UUIDv5(keyNamespace, "ID:broker-1-1:1:1:1:1")},
		{name: "a UUID header keeps its value", source: "header:message-id", body: `{}`,
			headers: map[string]string{"message-id": uuid}, wantID: "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"},
		{name: "header absent", source: "header:message-id", body: `{"id":"evt-456"}`, wantReason: ReasonMissingID},
		{name: "header with NUL", source: "header:message-id", body: `{}`, headers: map[string]string{"message-id": "a\x00b"}, wantReason: ReasonInvalidID},
		{name: "numeric id", body: `{"id":456}`, wantReason: ReasonInvalidID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := ParseIDSource(tt.source)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := Decode([]byte(tt.body), func(k string) string { return tt.headers[k] }, Options{DefaultEventType: "t", IDSource: src})
			if tt.wantReason != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Reason != tt.wantReason {
					t.Fatalf("err = %v, want reason %s", err, tt.wantReason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if ev.ID != tt.wantID || ev.AggregateID != tt.wantID {
				t.Fatalf("id %s aggregate %s, want %s for both", ev.ID, ev.AggregateID, tt.wantID)
			}
		})
	}
}

func TestParseIDSource(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{in: "", want: "payload:id"},
		{in: "payload:id", want: "payload:id"},
		{in: "payload:eventId", want: "payload:eventId"},
		{in: "header:message-id", want: "header:message-id"},
		{in: "header:", bad: true},
		{in: "payload", bad: true},
		{in: "body:id", bad: true},
		{in: "header:a\nb", bad: true},
	} {
		src, err := ParseIDSource(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && src.String() != tc.want) {
			t.Errorf("ParseIDSource(%q) = %v, %v; want %q (bad %v)", tc.in, src, err, tc.want, tc.bad)
		}
	}
}

// FuzzIDSource: any id-source setting, body and header value either decode to an event
// whose journal id is a canonical UUID, or are refused with a reason; a parsed source
// reads back from its own String.
func FuzzIDSource(f *testing.F) {
	f.Add("", `{"id":"evt-456"}`, "")
	f.Add("header:message-id", `{}`, "ID:b-1:1:1:1:1")
	f.Add("payload:eventId", `{"eventId":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"}`, "")
	f.Add("header:message-id", `{}`, "\xff")
	f.Fuzz(func(t *testing.T, source, body, hv string) {
		src, err := ParseIDSource(source)
		if err != nil {
			return
		}
		if again, err := ParseIDSource(src.String()); err != nil || again != src {
			t.Fatalf("ParseIDSource(%q).String() = %q reads back as %v, %v", source, src.String(), again, err)
		}
		ev, err := Decode([]byte(body), func(string) string { return hv }, Options{DefaultEventType: "d", IDSource: src})
		if err != nil {
			if inv, ok := errors.AsType[*Invalid](err); !ok || inv.Reason == "" {
				t.Fatalf("error without reason: %v", err)
			}
			return
		}
		if c, ok := CanonicalUUID(ev.ID); !ok || c != ev.ID {
			t.Fatalf("journal id %q is not a canonical UUID", ev.ID)
		}
	})
}
