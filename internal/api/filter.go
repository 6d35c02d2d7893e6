package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

// Listing limits.
const (
	DefaultLimit = 50
	MaxLimit     = 500

	maxCursorLen      = 512
	maxPayloadFields  = 20
	maxFieldNameLen   = 128
	maxFieldValueLen  = 1024
	maxFieldPathDepth = 8
)

// Cursor kinds: a cursor from one listing is refused by another.
const (
	cursorJournal    = "j"
	cursorQuarantine = "q"
)

// cursor is the position after the last item of a page. It travels as base64url JSON:
// opaque to clients, and only a position, so a forged one can only skip rows the
// client could list anyway.
type cursor struct {
	Kind string     `json:"k"`
	Desc bool       `json:"d,omitempty"`
	Seq  int64      `json:"s,omitempty"` // journal: sequence_no
	At   *time.Time `json:"t,omitempty"` // quarantine: received_at
	ID   string     `json:"i,omitempty"` // quarantine: id
}

func encodeCursor(c cursor) string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // a struct of strings, numbers and a time cannot fail to marshal
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

var errBadCursor = errors.New("cursor is not one this server issued")

func decodeCursor(s string) (cursor, error) {
	if len(s) > maxCursorLen {
		return cursor{}, errBadCursor
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return cursor{}, errBadCursor
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var c cursor
	if err := dec.Decode(&c); err != nil || dec.More() {
		return cursor{}, errBadCursor
	}
	switch c.Kind {
	case cursorJournal:
		if c.Seq <= 0 || c.At != nil || c.ID != "" {
			return cursor{}, errBadCursor
		}
	case cursorQuarantine:
		id, ok := message.CanonicalUUID(c.ID)
		if c.Seq != 0 || c.At == nil || !ok || id != c.ID || c.At.Year() < 1 || c.At.Year() > 9999 {
			return cursor{}, errBadCursor
		}
	default:
		return cursor{}, errBadCursor
	}
	return c, nil
}

// pageParams are the paging parameters every listing takes.
type pageParams struct {
	Limit  int
	Desc   bool
	Cursor *cursor
}

// parsePage reads limit, order and cursor. problems collects one message per bad parameter.
func parsePage(q url.Values, kind string, problems map[string]string) pageParams {
	p := pageParams{Limit: DefaultLimit, Desc: true}
	if v, ok := single(q, "limit", problems); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxLimit {
			problems["limit"] = fmt.Sprintf("must be an integer from 1 to %d", MaxLimit)
		} else {
			p.Limit = n
		}
	}
	if v, ok := single(q, "order", problems); ok {
		switch strings.ToLower(v) {
		case "desc":
			p.Desc = true
		case "asc":
			p.Desc = false
		default:
			problems["order"] = `must be "asc" or "desc"`
		}
	}
	if v, ok := single(q, "cursor", problems); ok {
		c, err := decodeCursor(v)
		switch {
		case err != nil || c.Kind != kind:
			problems["cursor"] = errBadCursor.Error()
		case c.Desc != p.Desc && problems["order"] == "":
			problems["cursor"] = "cursor was issued for the other order"
		default:
			p.Cursor = &c
		}
	}
	return p
}

// single returns the one value of a parameter; a repeated parameter is a problem.
func single(q url.Values, name string, problems map[string]string) (string, bool) {
	vs, ok := q[name]
	if !ok {
		return "", false
	}
	if len(vs) != 1 {
		problems[name] = "must be given once"
		return "", false
	}
	return vs[0], true
}

// eventQuery is a parsed journal listing request.
type eventQuery struct {
	Filter journal.Filter
	Page   pageParams
}

func (q eventQuery) journalPage() journal.Page {
	p := journal.Page{Limit: q.Page.Limit, Desc: q.Page.Desc}
	if q.Page.Cursor != nil {
		seq := q.Page.Cursor.Seq
		p.After = &seq
	}
	return p
}

// reserved are the parameters that are not payload fields.
var reserved = map[string]bool{"status": true, "since": true, "until": true, "limit": true, "cursor": true, "order": true}

// parseEventQuery reads a journal listing's query string. Every parameter that is not
// reserved is a payload field the entry must contain: ?jurisdiction=mga becomes
// payload @> {"jurisdiction":"mga"}, and a dotted name is a nested field
// (?address.country=mt becomes {"address":{"country":"mt"}}). Values are strings.
// allowed restricts status values (nil: any status); admin listings also reserve "type".
func parseEventQuery(q url.Values, allowed []journal.Status, withType bool) (eventQuery, error) {
	problems := map[string]string{}
	var out eventQuery
	out.Page = parsePage(q, cursorJournal, problems)

	if vs, ok := q["status"]; ok {
		statuses, err := parseStatuses(vs, allowed)
		if err != nil {
			problems["status"] = err.Error()
		}
		out.Filter.Statuses = statuses
	} else if allowed != nil {
		out.Filter.Statuses = allowed
	}
	for _, name := range []string{"since", "until"} {
		if v, ok := single(q, name, problems); ok {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				problems[name] = "must be an RFC 3339 timestamp, e.g. 2025-01-31T12:00:00Z"
				continue
			}
			if name == "since" {
				out.Filter.Since = t
			} else {
				out.Filter.Until = t
			}
		}
	}
	fields := map[string]string{}
	for name, vs := range q {
		switch {
		case reserved[name]:
		case withType && name == "type":
			if v, ok := single(q, name, problems); ok {
				if !validText(v) {
					problems[name] = "must be UTF-8 without NUL"
				}
				out.Filter.EventType = v
			}
		default:
			if len(vs) != 1 {
				problems[name] = "payload filter must be given once"
				continue
			}
			fields[name] = vs[0]
		}
	}
	contains, err := containment(fields)
	if err != nil {
		problems["payload"] = err.Error()
	}
	out.Filter.Contains = contains
	if len(problems) > 0 {
		return eventQuery{}, BadRequest("invalid query", problems)
	}
	return out, nil
}

// parseStatuses accepts repeated or comma-separated statuses, in any case.
func parseStatuses(vs []string, allowed []journal.Status) ([]journal.Status, error) {
	var out []journal.Status
	seen := map[journal.Status]bool{}
	for _, v := range vs {
		for _, x := range strings.Split(v, ",") {
			s := journal.Status(strings.ToUpper(strings.TrimSpace(x)))
			if s == "" || seen[s] {
				continue
			}
			ok := s.Valid()
			if ok && allowed != nil {
				ok = slices.Contains(allowed, s)
			}
			if !ok {
				set := journal.Statuses
				if allowed != nil {
					set = allowed
				}
				return nil, fmt.Errorf("must be one or more of %s", strings.Join(journal.StatusText(set), ", "))
			}
			seen[s] = true
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("must not be empty")
	}
	return out, nil
}

// containment builds the JSON object for payload @> from field paths and values.
func containment(fields map[string]string) (json.RawMessage, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	if len(fields) > maxPayloadFields {
		return nil, fmt.Errorf("at most %d payload filters", maxPayloadFields)
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names) // deterministic errors
	root := map[string]any{}
	for _, name := range names {
		value := fields[name]
		if len(name) > maxFieldNameLen || len(value) > maxFieldValueLen {
			return nil, fmt.Errorf("filter %.40q: names are at most %d bytes and values %d", name, maxFieldNameLen, maxFieldValueLen)
		}
		if !validText(name) || !validText(value) {
			return nil, fmt.Errorf("filter %.40q: names and values must be UTF-8 without NUL", name)
		}
		path := strings.Split(name, ".")
		if len(path) > maxFieldPathDepth {
			return nil, fmt.Errorf("filter %.40q: at most %d levels", name, maxFieldPathDepth)
		}
		node := root
		for i, key := range path {
			if key == "" {
				return nil, fmt.Errorf("filter %.40q: empty field name", name)
			}
			if i == len(path)-1 {
				if _, taken := node[key]; taken {
					return nil, fmt.Errorf("filter %.40q conflicts with a nested filter", name)
				}
				node[key] = value
				break
			}
			switch next := node[key].(type) {
			case nil:
				m := map[string]any{}
				node[key] = m
				node = m
			case map[string]any:
				node = next
			default:
				return nil, fmt.Errorf("filter %.40q conflicts with filter on %q", name, key)
			}
		}
	}
	b, err := json.Marshal(root)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// validText refuses what JSONB cannot store: invalid UTF-8 and NUL.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// filterBody is the filter of the bulk admin actions.
type filterBody struct {
	Status  stringList      `json:"status"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload"`
	Since   string          `json:"since"`
	Until   string          `json:"until"`
	DryRun  bool            `json:"dry_run"`
}

// stringList accepts "X" or ["X", "Y"].
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("must be a string or an array of strings")
	}
	*l = many
	return nil
}

// parseFilterBody decodes and validates a bulk action's body. An empty body is an
// empty filter.
func parseFilterBody(body []byte, allowed []journal.Status) (journal.Filter, bool, error) {
	var fb filterBody
	if len(bytes.TrimSpace(body)) > 0 {
		if err := decodeStrict(body, &fb); err != nil {
			return journal.Filter{}, false, err
		}
	}
	problems := map[string]string{}
	var f journal.Filter
	if len(fb.Status) > 0 {
		st, err := parseStatuses(fb.Status, allowed)
		if err != nil {
			problems["status"] = err.Error()
		}
		f.Statuses = st
	}
	f.EventType = strings.TrimSpace(fb.Type)
	if !validText(f.EventType) {
		problems["type"] = "must be UTF-8 without NUL"
	}
	if p := bytes.TrimSpace(fb.Payload); len(p) > 0 && string(p) != "null" {
		c, err := normaliseObject(p)
		if err != nil {
			problems["payload"] = err.Error()
		} else {
			f.Contains = c
		}
	}
	for name, v := range map[string]string{"since": fb.Since, "until": fb.Until} {
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			problems[name] = "must be an RFC 3339 timestamp"
			continue
		}
		if name == "since" {
			f.Since = t
		} else {
			f.Until = t
		}
	}
	if len(problems) > 0 {
		return journal.Filter{}, false, BadRequest("invalid filter", problems)
	}
	return f, fb.DryRun, nil
}

// nulEscape matches a \u0000 escape (an odd run of backslashes before it), not the text
// "\\u0000".
var nulEscape = regexp.MustCompile(`(^|[^\\])(\\\\)*\\u0000`)

// normaliseObject re-encodes a JSON object so that what reaches the database is
// valid UTF-8 without lone surrogates (encoding/json replaces both), numbers kept as
// written, and refuses NUL, which JSONB cannot store.
func normaliseObject(raw []byte) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil || obj == nil {
		return nil, errors.New("must be a JSON object the payload contains")
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, errors.New("must be a JSON object the payload contains")
	}
	if nulEscape.Match(out) {
		return nil, errors.New(`must not contain \u0000`)
	}
	return out, nil
}

// jsonProblem turns a decoding error into a short message naming the field.
func JSONProblem(err error) any {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return map[string]string{te.Field: "must be a " + te.Type.String()}
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d: %v", se.Offset, se)
	}
	return err.Error()
}
