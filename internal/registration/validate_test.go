package registration_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/registration"
)

// Issue 10: lookalike e-mails registered as different people (NFD vs NFC, a zero-width
// space, full-width letters, Cyrillic letters).
func TestNormalizeEmail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string // want "" means refused
	}{
		{"plain, case folded", " Alice@Example.COM ", "alice@example.com"},
		{"NFD becomes NFC", "jose\u0301@example.com", "jos\u00e9@example.com"},
		{"NFC stays", "jos\u00e9@example.com", "jos\u00e9@example.com"},
		{"Kelvin sign is K (canonical)", "\u212Aate@example.com", "kate@example.com"},
		{"zero-width space", "ali\u200bce@example.com", ""},
		{"zero-width joiner", "ali\u200dce@example.com", ""},
		{"BOM", "\ufeffalice@example.com", ""},
		{"right-to-left override", "alice\u202e@example.com", ""},
		{"soft hyphen", "al\u00adice@example.com", ""},
		{"NUL", "alice\x00@example.com", ""},
		{"no-break space", "alice\u00a0@example.com", ""},
		{"full-width letters", "\uff41\uff4c\uff49\uff43\uff45@example.com", ""},
		{"full-width at sign", "alice\uff20example.com", ""},
		{"ligature", "\ufb01sh@example.com", ""},
		{"Cyrillic a among Latin", "\u0430lice@example.com", ""},
		{"Greek omicron among Latin", "b\u03bfb@example.com", ""},
		{"Cyrillic letter in the domain", "alice@ex\u0430mple.com", ""},
		{"Unicode domain", "alice@b\u00fccher.de", ""},
		{"punycode domain", "alice@xn--bcher-kva.de", "alice@xn--bcher-kva.de"},
		{"all Cyrillic local part", "\u0410\u043b\u0438\u0441\u0430@example.com", "\u0430\u043b\u0438\u0441\u0430@example.com"},
		{"Japanese mix", "\u7530\u4e2d\u305f\u306a\u304btanaka@example.jp", "\u7530\u4e2d\u305f\u306a\u304btanaka@example.jp"},
		{"private use", "alice\ue000@example.com", ""},
		{"unassigned", "alice\U000e0fff@example.com", ""},
		{"invalid UTF-8", "alice\xff@example.com", ""},
		{"display name", "Alice <alice@example.com>", ""},
		{"comment", "alice(x)@example.com", ""},
		{"no dot in domain", "alice@localhost", ""},
		{"too long", strings.Repeat("a", 250) + "@example.com", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := registration.NormalizeEmail(tt.in)
			if tt.want == "" {
				if err == nil {
					t.Fatalf("accepted %q as %q", tt.in, got)
				}
				if strings.Contains(err.Error(), "alice") {
					t.Errorf("error %q quotes the address", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeEmail(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestNormalizeName(t *testing.T) {
	t.Parallel()
	for in, ok := range map[string]bool{
		"Ada Lovelace": true, "Zo\u0308e": true, "\u0645\u0647\u200c\u0633\u0627": true, // Persian needs ZWNJ
		"Ada\u202eecalevoL": false, "A\u200bda": false, "Ada\nLovelace": false, " ": false,
	} {
		got, err := registration.NormalizeName(in)
		if (err == nil) != ok {
			t.Errorf("NormalizeName(%q) = %q, %v; want ok=%v", in, got, err, ok)
		}
		if err == nil && !utf8.ValidString(got) {
			t.Errorf("%q", got)
		}
	}
}

// Issue 10: createdAt 0001-01-01 was accepted by the API, then rejected by the handler.
func TestCreatedAtBounds(t *testing.T) {
	t.Parallel()
	for _, ts := range []string{"0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "1899-12-31T23:59:59Z"} {
		_, err := registration.Parse([]byte(`{"name":"a","email":"a@b.co","jurisdiction":"mga","createdAt":"` + ts + `"}`))
		if !errors.Is(err, registration.ErrInvalid) || !strings.Contains(err.Error(), "createdAt") {
			t.Errorf("createdAt %s: %v", ts, err)
		}
	}
}

// The lookalikes that do get through normalisation are one customer: NFD and NFC, and
// case, collide in the handler.
func TestLookalikesAreOneCustomer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	reg := process.NewRegistry()
	reg.Register(registration.EventType, registration.Handler)
	e := process.New(db.Pool, reg, process.Config{}, nil, nil)
	payload := func(email string) []byte {
		return []byte(`{"id":"` + pt.NewID() + `","type":"registration","name":"Jos\u00e9","email":"` + email + `","jurisdiction":"mga","createdAt":"2025-01-02T03:04:05Z"}`)
	}
	ids := pt.Ingest(t, db.Pool, payload("jos\u00e9@example.com"), payload("JOSE\u0301@Example.com"), payload("jo\u200bs\u00e9@example.com"))
	want := []process.Outcome{process.OutcomeProcessed, process.OutcomeRejected, process.OutcomeRejected}
	for i, id := range ids {
		if got, err := e.Process(ctx, id); err != nil || got != want[i] {
			t.Errorf("event %d: %q, %v; want %q", i, got, err, want[i])
		}
	}
	if n, err := registration.Count(ctx, db.Pool); err != nil || n != 1 {
		t.Errorf("customers = %d, %v; want 1", n, err)
	}
	for _, id := range ids[1:] {
		if _, _, le := pt.Status(t, db.Pool, id); strings.Contains(le, "example.com") {
			t.Errorf("last_error quotes the address: %q", le)
		}
	}
}

func FuzzNormalizeEmail(f *testing.F) {
	for _, s := range []string{"alice@example.com", "jose\u0301@example.com", "\u0430lice@example.com", "a\u200b@b.co", "\uff41@b.co", "@", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := registration.NormalizeEmail(s)
		if err != nil {
			return
		}
		again, err := registration.NormalizeEmail(got)
		if err != nil || again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q, %v", s, got, again, err)
		}
		if !utf8.ValidString(got) || len(got) > registration.MaxEmailLen || strings.ContainsAny(got, " \t\r\n\u200b\ufeff") {
			t.Fatalf("accepted %q", got)
		}
	})
}
