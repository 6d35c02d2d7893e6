package journal

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// Issue 18, item 3: whatever a handler returns, last_error gets valid UTF-8 without
// NUL, cut on a rune boundary.
func FuzzErrorText(f *testing.F) {
	f.Add(strings.Repeat("x", 3999) + "€tail")
	f.Add("bad\x00byte")
	f.Add(string([]byte{0xff, 0xfe, 'x', 0xc3}))
	f.Add(strings.Repeat("é", 2500) + "\x00\xff")
	f.Fuzz(func(t *testing.T, s string) {
		got := errorText(s)
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) {
			t.Fatalf("errorText(%q) = %q: not storable", s, got)
		}
		if len(got) > maxErrorText+len("…") {
			t.Fatalf("errorText: %d bytes, want at most %d", len(got), maxErrorText+len("…"))
		}
		if utf8.ValidString(s) && !strings.ContainsRune(s, 0) && len(s) <= maxErrorText && got != s {
			t.Fatalf("errorText changed storable text %q to %q", s, got)
		}
	})
}

// The database's complaint about a refused row goes to quarantine.detail: it may quote
// the row (multi-byte text) and is cut, so it is made storable the same way.
func TestRefusalDetailStorable(t *testing.T) {
	t.Parallel()
	for _, msg := range []string{
		strings.Repeat("x", 1990) + strings.Repeat("€", 20),
		"duplicate key \x00 value (\xff)",
	} {
		d := refusalDetail(errors.New(msg))
		if !utf8.ValidString(d) || strings.ContainsRune(d, 0) || len(d) > maxRefusalDetail+len("…") {
			t.Errorf("refusalDetail: %d bytes, valid %v, NUL %v", len(d), utf8.ValidString(d), strings.ContainsRune(d, 0))
		}
	}
}
