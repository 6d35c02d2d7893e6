package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

// rowDecoder decodes the rows of a batch one at a time. Each row is JSON text that the
// batch's json.Decoder has already checked, so it is scanned in place instead of
// unmarshalled into maps and structs: a row that is not work allocates nothing, one
// that is allocates its columns. It decodes what encoding/json decoded before rows
// were streamed: the row and its "after" as maps (exact names, the last of duplicate
// names wins), the envelope as WrappedRow or CRDBMeta (names matched without regard to
// case, every occurrence decoded, so any one that is not a string fails the row).
// FuzzDecodeMatchesReference holds it to that.
type rowDecoder struct {
	// brief: once one row's error has been built with the row's text in it, later ones
	// get shared errors without it. The handler logs only the first, and a batch of a
	// million bad ids must not build a million messages.
	brief    bool
	detailed bool
	// Scratch for unescaped member names and string values, reused row after row.
	name, str []byte
}

// Poison-row errors without details are shared, so that a batch of a million of them
// allocates none.
var (
	errRowNotObject   = errors.New("message is not a JSON object")
	errRowNoEnvelope  = fmt.Errorf("message has neither \"after\" nor %q", crdbField)
	errAfterNotObject = errors.New("\"after\" is not a JSON object")
	errWrappedTopic   = errors.New("wrapped message: \"topic\" is not a string")
	errWrappedUpdated = errors.New("wrapped message: \"updated\" is not a string")
	errMetaNotObject  = fmt.Errorf("bare message: %q is not a JSON object", crdbField)
	errMetaNotString  = fmt.Errorf("bare message: a field of %q (topic, updated, resolved) is not a string", crdbField)
	errNoID           = errors.New("no \"id\" column and no [\"<id>\"] key")
	errIDNotUUID      = errors.New("column \"id\" is not a UUID")
	errSeqNotInt      = errors.New("column \"sequence_no\" is not an integer")
	errColNotString   = map[string]error{}
)

// stringColumns are the journal columns read as strings, in the order they are checked.
var stringColumns = []string{"id", "status", "event_type", "aggregate_id"}

func init() {
	for _, c := range stringColumns {
		errColNotString[c] = fmt.Errorf("column %q is not a string", c)
	}
}

// Envelope field names matched as encoding/json matches struct fields.
var (
	nameKey      = []byte("key")
	nameTopic    = []byte("topic")
	nameUpdated  = []byte("updated")
	nameResolved = []byte("resolved")
)

// columns holds the raw values of the journal columns of an object, as a map would:
// exact names, the last of duplicates. nil: absent.
type columns struct {
	id, status, eventType, aggregateID, sequenceNo, nextAttemptAt []byte
}

func (c *columns) set(name, val []byte) {
	switch string(name) {
	case "id":
		c.id = val
	case "status":
		c.status = val
	case "event_type":
		c.eventType = val
	case "aggregate_id":
		c.aggregateID = val
	case "sequence_no":
		c.sequenceNo = val
	case "next_attempt_at":
		c.nextAttemptAt = val
	}
}

// envelope holds the raw values of WrappedRow's or CRDBMeta's fields: the last value of
// each (for the strings, the last string: null leaves a string field as it was), and
// the error for the first string field whose value is neither a string nor null.
type envelope struct {
	key, topic, updated, resolved []byte
	err                           error
}

func (e *envelope) set(name, val []byte, errTopic, errUpdated error) {
	switch {
	case bytes.EqualFold(name, nameKey):
		e.key = val
	case bytes.EqualFold(name, nameTopic):
		e.setString(&e.topic, val, errTopic)
	case bytes.EqualFold(name, nameUpdated):
		e.setString(&e.updated, val, errUpdated)
	}
}

func (e *envelope) setString(dst *[]byte, val []byte, errNotString error) {
	switch {
	case isString(val):
		*dst = val
	case !isNullLiteral(val) && e.err == nil:
		e.err = errNotString
	}
}

// decode decodes one row of a batch.
func (d *rowDecoder) decode(raw []byte) Row {
	raw = trimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return Row{Err: errRowNotObject}
	}
	var (
		after, meta       []byte
		hasAfter, hasMeta bool
		top               columns
		wrapped           envelope
	)
	for m := newMembers(raw); m.next(); {
		name := d.memberName(m.key)
		switch string(name) {
		case "after":
			after, hasAfter = m.val, true
		case crdbField:
			meta, hasMeta = m.val, true
		}
		top.set(name, m.val)
		wrapped.set(name, m.val, errWrappedTopic, errWrappedUpdated)
	}
	var r Row
	var cols columns
	switch {
	case hasAfter:
		if wrapped.err != nil {
			return Row{Err: wrapped.err}
		}
		d.envelope(&r, &wrapped)
		if isNullLiteral(after) {
			r.Deleted = true
			return r
		}
		if len(after) == 0 || after[0] != '{' {
			r.Err = errAfterNotObject
			return r
		}
		for m := newMembers(after); m.next(); {
			cols.set(d.memberName(m.key), m.val)
		}
	case hasMeta:
		var bare envelope
		if err := d.crdbMeta(meta, &bare); err != nil {
			return Row{Err: err}
		}
		d.envelope(&r, &bare)
		cols = top
	default:
		return Row{Err: errRowNoEnvelope}
	}
	r.Journal, r.Err = d.journalRow(&cols, r.Key)
	return r
}

// crdbMeta reads the "__crdb__" object of a bare row into e, as encoding/json decodes
// CRDBMeta: null is an empty one.
func (d *rowDecoder) crdbMeta(val []byte, e *envelope) error {
	if isNullLiteral(val) {
		return nil
	}
	if len(val) == 0 || val[0] != '{' {
		return errMetaNotObject
	}
	for m := newMembers(val); m.next(); {
		name := d.memberName(m.key)
		if bytes.EqualFold(name, nameResolved) {
			e.setString(&e.resolved, m.val, errMetaNotString)
			continue
		}
		e.set(name, m.val, errMetaNotString, errMetaNotString)
	}
	return e.err
}

// envelope copies the envelope fields into r: they outlive the decoder's buffer.
func (d *rowDecoder) envelope(r *Row, e *envelope) {
	if e.key != nil {
		r.Key = append(json.RawMessage(nil), e.key...)
	}
	if e.topic != nil {
		r.Topic = string(d.text(e.topic))
	}
	if e.updated != nil {
		r.Updated = string(d.text(e.updated))
	}
}

// journalRow reads the journal columns. The id comes from the "id" column, else from
// the key (["<id>"]) when a CDC query did not project it. Missing columns stay zero; a
// column of the wrong type makes the row poison, except next_attempt_at, which is zero
// when not understood.
func (d *rowDecoder) journalRow(cols *columns, key []byte) (*JournalRow, error) {
	var id []byte
	if cols.id == nil {
		elem, ok := onlyElement(trimSpace(key))
		if !ok || !(isString(elem) || isNullLiteral(elem)) {
			return nil, errNoID
		}
		if isString(elem) {
			id = d.text(elem)
		}
	} else {
		v, err := d.stringColumn("id", cols.id)
		if err != nil {
			return nil, err
		}
		id = v
	}
	canon, ok := "", false
	if len(id) == 36 || len(id) == 38 { // the only lengths CanonicalUUID accepts
		canon, ok = message.CanonicalUUID(string(id))
	}
	if !ok {
		if d.detail() {
			return nil, fmt.Errorf("column \"id\" is %q, not a UUID", message.Truncate(string(id), 48))
		}
		return nil, errIDNotUUID
	}
	// Locals until the row is known to be usable: only a usable row allocates its JournalRow.
	var text [3]string // status, event_type, aggregate_id
	for i, c := range [...]struct {
		name string
		val  []byte
	}{{"status", cols.status}, {"event_type", cols.eventType}, {"aggregate_id", cols.aggregateID}} {
		if c.val == nil {
			continue
		}
		v, err := d.stringColumn(c.name, c.val)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			text[i] = string(status(v)) // no copy: the interned constant
		} else {
			text[i] = string(v)
		}
	}
	var seq int64
	if v := cols.sequenceNo; v != nil && !isNullLiteral(v) {
		// INT8 is a JSON number; accept a string too, as some encoders quote 64-bit ints.
		n, err := strconv.ParseInt(string(bytes.Trim(v, `"`)), 10, 64)
		if err != nil {
			if d.detail() {
				return nil, fmt.Errorf("column \"sequence_no\" is %s, not an integer", message.Truncate(string(v), 32))
			}
			return nil, errSeqNotInt
		}
		seq = n
	}
	var next time.Time
	if v := cols.nextAttemptAt; isString(v) {
		next = parseTimestamp(string(d.text(v)))
	}
	return &JournalRow{ID: canon, Status: journal.Status(text[0]), EventType: text[1], AggregateID: text[2], SequenceNo: seq, NextAttemptAt: next}, nil
}

// stringColumn is the text of a string column (empty for null), valid until the next
// call of d.text.
func (d *rowDecoder) stringColumn(name string, val []byte) ([]byte, error) {
	switch {
	case isString(val):
		return d.text(val), nil
	case isNullLiteral(val):
		return nil, nil
	case d.detail():
		return nil, fmt.Errorf("column %q is %s, not a string", name, message.Truncate(string(val), 32))
	default:
		return nil, errColNotString[name]
	}
}

// detail reports whether to build an error that quotes the row.
func (d *rowDecoder) detail() bool {
	if d.brief && d.detailed {
		return false
	}
	d.detailed = true
	return true
}

// status returns the journal's constant for a known status, so that rows do not each
// allocate their own copy.
func status(v []byte) journal.Status {
	for _, s := range journal.Statuses {
		if string(v) == string(s) {
			return s
		}
	}
	return journal.Status(v)
}

// memberName is a member's name unescaped, valid until the next call.
func (d *rowDecoder) memberName(quoted []byte) []byte {
	if bytes.IndexByte(quoted, '\\') < 0 {
		// Invalid UTF-8 is left as is, where encoding/json writes U+FFFD: neither
		// matches a name the decoder looks for.
		return quoted
	}
	d.name = appendUnquoted(d.name[:0], quoted)
	return d.name
}

// text is the content of the JSON string val (quotes included), unescaped as
// encoding/json does; valid until the next call.
func (d *rowDecoder) text(val []byte) []byte {
	if len(val) < 2 {
		return nil
	}
	s := val[1 : len(val)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return s
	}
	d.str = appendUnquoted(d.str[:0], s)
	return d.str
}

// The scanning below walks JSON text that encoding/json has checked. It does not check
// it again, but never reads out of bounds whatever it is given.

func isString(v []byte) bool      { return len(v) >= 2 && v[0] == '"' }
func isNullLiteral(v []byte) bool { return string(trimSpace(v)) == "null" }

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] ('"'), or -1 if it
// does not end.
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = skipString(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	start := i
	for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != '}' && b[i] != ']' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// members iterates over the members of a JSON object.
type members struct {
	b        []byte
	i        int
	key, val []byte // key: between its quotes, escapes intact
}

func newMembers(obj []byte) members { return members{b: obj, i: 1} }

func (m *members) next() bool {
	b := m.b
	i := skipSpace(b, m.i)
	if i < len(b) && b[i] == ',' {
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		return false
	}
	end := skipString(b, i)
	if end < 0 {
		return false
	}
	m.key = b[i+1 : end-1]
	i = skipSpace(b, end)
	if i >= len(b) || b[i] != ':' {
		return false
	}
	i = skipSpace(b, i+1)
	end = skipValue(b, i)
	if end < 0 {
		return false
	}
	m.val, m.i = b[i:end], end
	return true
}

// onlyElement returns the element of a JSON array of exactly one.
func onlyElement(arr []byte) ([]byte, bool) {
	if len(arr) == 0 || arr[0] != '[' {
		return nil, false
	}
	i := skipSpace(arr, 1)
	end := skipValue(arr, i)
	if end < 0 {
		return nil, false
	}
	if j := skipSpace(arr, end); j >= len(arr) || arr[j] != ']' {
		return nil, false
	}
	return arr[i:end], true
}

// appendUnquoted appends the JSON string content s (no quotes) unescaped, as
// encoding/json does: invalid UTF-8 and lone surrogates become U+FFFD.
func appendUnquoted(dst, s []byte) []byte {
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\' && r+1 < len(s):
			switch e := s[r+1]; e {
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := getu4(s[r:])
				if rr < 0 {
					dst = append(dst, c)
					r++
					continue
				}
				r += 6
				if utf16.IsSurrogate(rr) {
					if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
						dst = utf8.AppendRune(dst, dec)
						r += 6
						continue
					}
					rr = unicode.ReplacementChar
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default: // " \ / '
				dst = append(dst, e)
			}
			r += 2
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
