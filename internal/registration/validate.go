package registration

import (
	"errors"
	"fmt"
	"net/mail"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// The identity rules of the demo, shared by POST /registration and the handler, so the
// API accepts exactly what the handler will. A customer is (jurisdiction, email), so
// two spellings of one address must become one string, and strings that look alike
// but differ must not both get in:
//
//   - Everything is trimmed and put in Unicode NFC: "é" typed as e + U+0301 (NFD) and
//     as U+00E9 are one address.
//   - Case: the whole address is lower-cased (Unicode lower case of the NFC form). RFC
//     5321 lets a server treat local parts case-sensitively; no mail provider inboxd
//     knows of does, and two customers differing only by case are far likelier the same
//     person.
//   - Refused: control and format characters (invisible ones: zero-width space and
//     joiners, bidirectional overrides, soft hyphen, BOM), any kind of space, private
//     use and unassigned code points, invalid UTF-8.
//   - Refused: compatibility characters, whose NFKC form differs (full-width "ａｌｉｃｅ",
//     ligatures, superscripts, circled letters): they render like plain letters.
//   - The domain must be ASCII: an internationalised domain is given in its xn-- form,
//     so lookalike domains cannot hide in Unicode.
//   - The local part may be non-ASCII (RFC 6531), but not mix scripts: Latin with
//     Cyrillic ("аlice" with a Cyrillic а) or Greek is refused. Scripts that are written
//     together are allowed together (UTS #39 "highly restrictive": Latin with Han and
//     Hiragana/Katakana, with Han and Bopomofo, or with Han and Hangul). An address
//     wholly in one script (all Cyrillic) is accepted even when it looks like a Latin
//     one: whole-script confusables are not detected.
//
// Names are trimmed and put in NFC; control and format characters are refused, except
// the zero-width (non-)joiner that Persian and Indic names need. Names are not
// compared, so lookalikes in them do not matter.

// Limits on field sizes; the customers table has none, the business does.
const (
	MaxNameLen  = 200
	MaxEmailLen = 254 // RFC 5321 path limit
)

// Bounds of createdAt: the zero time (0001-01-01) and other sentinel values are not a
// registration date.
var (
	MinCreatedAt = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxCreatedAt = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// Problems maps a field's JSON name to what is wrong with it ("is required"). Messages
// never quote the value: they end up in logs and in the journal's last_error.
type Problems map[string]string

// Err returns nil for no problems, else an error wrapping ErrInvalid that lists them.
func (p Problems) Err() error {
	if len(p) == 0 {
		return nil
	}
	fields := make([]string, 0, len(p))
	for f := range p {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	parts := make([]string, len(fields))
	for i, f := range fields {
		parts[i] = f + " " + p[f]
	}
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(parts, "; "))
}

// Check puts r in canonical form (see the rules above) and returns what is wrong with
// it; an empty result means valid.
func (r *Registration) Check() Problems {
	p := Problems{}
	name, err := NormalizeName(r.Name)
	r.Name = name
	if err != nil {
		p["name"] = err.Error()
	}
	email, err := NormalizeEmail(r.Email)
	r.Email = email
	if err != nil {
		p["email"] = err.Error()
	}
	r.Jurisdiction = strings.ToLower(strings.TrimSpace(r.Jurisdiction))
	switch {
	case r.Jurisdiction == "":
		p["jurisdiction"] = "is required"
	case !validJurisdiction(r.Jurisdiction):
		p["jurisdiction"] = "must be 2 to 10 letters or digits, e.g. mga"
	}
	switch {
	case r.CreatedAt.IsZero():
		p["createdAt"] = "is required (RFC 3339, e.g. 2025-01-31T12:00:00Z)"
	case r.CreatedAt.Before(MinCreatedAt) || r.CreatedAt.After(MaxCreatedAt):
		p["createdAt"] = "must lie between 1900-01-01 and 9999-12-31"
	}
	return p
}

var (
	errRequired = errors.New("is required")
	errInvalid  = errors.New("must be an email address such as jane@example.com")
)

// NormalizeName trims s and puts it in NFC; the error says what is wrong.
func NormalizeName(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("is not valid UTF-8")
	}
	s = norm.NFC.String(strings.TrimSpace(s))
	switch {
	case s == "":
		return s, errRequired
	case utf8.RuneCountInString(s) > MaxNameLen:
		return s, fmt.Errorf("must be at most %d characters", MaxNameLen)
	case strings.IndexFunc(s, invisibleInName) >= 0:
		return s, errors.New("must not contain control or invisible characters")
	}
	return s, nil
}

// invisible: control (Cc) and format (Cf) characters, the latter being zero-width
// spaces and joiners, bidirectional controls, soft hyphens, BOMs.
func invisible(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

// invisibleInName spares the zero-width joiner and non-joiner, which names in Persian
// and Indic scripts (and emoji sequences) need.
func invisibleInName(r rune) bool { return r != '\u200c' && r != '\u200d' && invisible(r) }

// NormalizeEmail returns the canonical form of an address (trimmed, NFC, lower case) or
// says why it is refused. See the rules at the top of this file.
func NormalizeEmail(s string) (string, error) {
	if !utf8.ValidString(s) {
		return "", errors.New("is not valid UTF-8")
	}
	s = strings.ToLower(norm.NFC.String(strings.TrimSpace(s)))
	s = norm.NFC.String(s) // lower-casing can leave a string unnormalised
	if s == "" {
		return s, errRequired
	}
	if len(s) > MaxEmailLen {
		return s, fmt.Errorf("must be at most %d bytes", MaxEmailLen)
	}
	for _, r := range s {
		if invisible(r) || unicode.IsSpace(r) || !unicode.IsGraphic(r) || unicode.Is(unicode.Co, r) {
			return s, errors.New("must not contain spaces, control or invisible characters")
		}
	}
	if !norm.NFKC.IsNormalString(s) {
		return s, errors.New("must not contain full-width or other compatibility characters (write ａ as a)")
	}
	at := strings.LastIndexByte(s, '@')
	if at <= 0 {
		return s, errInvalid
	}
	local, domain := s[:at], s[at+1:]
	for i := 0; i < len(domain); i++ {
		if domain[i] >= utf8.RuneSelf {
			return s, errors.New("domain must be ASCII: give an internationalised domain in its xn-- form")
		}
	}
	if !singleScript(local) {
		return s, errors.New("must not mix scripts (e.g. Latin and Cyrillic letters) in one address")
	}
	// A bare addr-spec only: "Name <a@b>" and comments parse too, but are not an address.
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" ||
		!strings.Contains(domain, ".") || strings.HasPrefix(domain, ".") || strings.HasSuffix(domain, ".") {
		return s, errInvalid
	}
	return s, nil
}

// scriptTables are the scripts singleScript tells apart; letters of any other script
// count as "other" (one more script).
var scriptTables = func() map[string]*unicode.RangeTable {
	m := make(map[string]*unicode.RangeTable, len(unicode.Scripts))
	for name, t := range unicode.Scripts {
		if name != "Common" && name != "Inherited" {
			m[name] = t
		}
	}
	return m
}()

// allowedMixes are the UTS #39 "highly restrictive" combinations.
var allowedMixes = []map[string]bool{
	{"Latin": true, "Han": true, "Hiragana": true, "Katakana": true},
	{"Latin": true, "Han": true, "Bopomofo": true},
	{"Latin": true, "Han": true, "Hangul": true},
}

// singleScript reports whether s's letters and marks come from one script, or from one
// of allowedMixes. Digits, punctuation and symbols (Common) count for none.
func singleScript(s string) bool {
	seen := map[string]bool{}
	for _, r := range s {
		if r < utf8.RuneSelf {
			if ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') {
				seen["Latin"] = true
			}
			continue
		}
		for name, t := range scriptTables {
			if unicode.Is(t, r) {
				seen[name] = true
				break
			}
		}
	}
	if len(seen) <= 1 {
		return true
	}
	for _, mix := range allowedMixes {
		ok := true
		for name := range seen {
			ok = ok && mix[name]
		}
		if ok {
			return true
		}
	}
	return false
}
