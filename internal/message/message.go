// Package message decodes inbound broker messages into journal events, or says
// precisely why a message cannot be one.
package message

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"unicode/utf8"

	"github.com/inboxd/inboxd/internal/defaults"
)

// Reason names why a message was quarantined. The values are stored in quarantine.reason.
type Reason string

const (
	ReasonTooLarge  Reason = "too_large"
	ReasonNotJSON   Reason = "not_json"
	ReasonNotObject Reason = "not_object"
	ReasonMissingID Reason = "missing_id"
	ReasonInvalidID Reason = "invalid_id"
	// ReasonMissingType: no event-type header, no payload "type", and no default event
	// type configured, so no handler could ever be chosen.
	ReasonMissingType Reason = "missing_type"
	ReasonIDConflict  Reason = "id_conflict"
	// ReasonInvalidHeader: an event-type or aggregate-id header the database cannot
	// store (NUL, invalid UTF-8) or that is absurdly long.
	ReasonInvalidHeader Reason = "invalid_header"
	// ReasonInvalidField: the payload's "type" or "aggregateId" is longer than the
	// journal can index (the database would refuse the whole batch for it).
	ReasonInvalidField Reason = "invalid_field"
	// ReasonDBRefused: the database itself refused the row for a deterministic reason
	// (detail holds the SQLSTATE and message); set by the journal, not by Decode.
	ReasonDBRefused Reason = "db_refused"
)

// maxHeaderValue bounds the event-type and aggregate-id a message may carry, from its
// headers or its payload: both are indexed columns, and PostgreSQL refuses a btree entry
// above about 2.7 KB (SQLSTATE 54000), which would fail the whole batch.
const maxHeaderValue = 256

// DefaultMaxBodyBytes bounds a message body; larger ones are quarantined, not parsed.
const DefaultMaxBodyBytes = defaults.MaxBodyBytes

// Header names inboxd reads from (and the API writes to) STOMP frames.
const (
	HeaderEventType   = "event-type"
	HeaderAggregateID = "aggregate-id"
)

// Invalid is the error for a message that cannot become a journal event.
type Invalid struct {
	Reason Reason
	Detail string
}

func (e *Invalid) Error() string { return fmt.Sprintf("%s: %s", e.Reason, e.Detail) }

// Event is a decoded, valid message.
type Event struct {
	// ID is the journal's primary key: the event id itself when it is a UUID (canonical,
	// lower case), else the UUIDv5 of the event's key (JournalID).
	ID          string
	EventType   string
	AggregateID string
	// Payload is the body as received; the journal stores it as JSONB.
	Payload []byte
}

// Options controls decoding.
type Options struct {
	MaxBodyBytes     int    // 0 means DefaultMaxBodyBytes
	DefaultEventType string // used when neither header nor payload names a type
	// IDSource says where the event id is read from (zero: the payload's "id").
	IDSource IDSource
	// Headers enumerates every header, for a binary-mode CloudEvent's extension
	// attributes (nil: only the attributes the CloudEvents spec defines are read).
	Headers iter.Seq2[string, string]
}

// Decode turns a message body and its headers into an Event. The event id is any
// non-empty string (opts.IDSource says where it is read); see JournalID for the
// journal's key computed from it. The error is always an
// *Invalid whose Reason says where the message must go.
//
// The event type comes from the event-type header, else the payload's "type", else
// opts.DefaultEventType. The aggregate id comes from the payload's "aggregateId", else
// the aggregate-id header, else the event id itself.
func Decode(body []byte, header func(string) string, opts Options) (Event, error) {
	limit := opts.MaxBodyBytes
	if limit <= 0 {
		limit = DefaultMaxBodyBytes
	}
	if len(body) > limit {
		return Event{}, &Invalid{ReasonTooLarge, fmt.Sprintf("body is %d bytes, limit is %d", len(body), limit)}
	}
	if prefix := binaryPrefix(header); prefix != "" {
		built, err := BinaryToStructured(prefix, body, header, opts.Headers)
		if err != nil {
			return Event{}, err
		}
		if len(built) > limit {
			return Event{}, &Invalid{ReasonTooLarge, fmt.Sprintf("binary-mode CloudEvent rebuilt as a structured one is %d bytes, limit is %d", len(built), limit)}
		}
		body = built
	}
	// PostgreSQL's jsonb rejects \u0000 and invalid UTF-8, which encoding/json accepts;
	// catch both here so that one bad message can never fail a whole batch insert.
	if !utf8.Valid(body) {
		return Event{}, &Invalid{ReasonNotJSON, "body is not valid UTF-8"}
	}
	if bytes.Contains(body, []byte(`\u0000`)) && containsNUL(body) {
		return Event{}, &Invalid{ReasonNotJSON, `body contains \u0000, which JSONB cannot store`}
	}
	fields, err := topLevelFields(body)
	if errors.Is(err, errNotObject) {
		return Event{}, &Invalid{ReasonNotObject, "body is JSON but not an object"}
	}
	if err != nil {
		return Event{}, &Invalid{ReasonNotJSON, "body is not JSON: " + err.Error()}
	}
	if fields == nil {
		return Event{}, &Invalid{ReasonNotObject, "body is JSON null, not an object"}
	}
	if isCloudEvent(fields, header) {
		return decodeCloudEvent(fields, body, header)
	}
	if opts.IDSource.ceOnly {
		return Event{}, &Invalid{ReasonMissingSpecVersion, `not a CloudEvent (no "specversion"), and id-source is cloudevents`}
	}
	canon, err := eventID(fields, header, opts.IDSource)
	if err != nil {
		return Event{}, err
	}
	ev := Event{ID: canon, Payload: body}
	for _, name := range []string{HeaderEventType, HeaderAggregateID} {
		if v := header(name); !storable(v) {
			return Event{}, &Invalid{ReasonInvalidHeader, fmt.Sprintf("header %s must be valid UTF-8 without NUL and at most %d bytes", name, maxHeaderValue)}
		}
	}
	ev.EventType = header(HeaderEventType)
	if ev.EventType == "" {
		ev.EventType = stringField(fields, "type")
	}
	if ev.EventType == "" {
		ev.EventType = opts.DefaultEventType
	}
	if ev.EventType == "" {
		return Event{}, &Invalid{ReasonMissingType, "no event type: send an event-type header or a \"type\" field, or set a default event type"}
	}
	ev.AggregateID = stringField(fields, "aggregateId")
	if ev.AggregateID == "" {
		ev.AggregateID = header(HeaderAggregateID)
	}
	if ev.AggregateID == "" {
		ev.AggregateID = canon
	}
	// From the payload these are valid UTF-8 without NUL already (checked above); only
	// their length is left to bound.
	if len(ev.EventType) > maxHeaderValue {
		return Event{}, &Invalid{ReasonInvalidField, fmt.Sprintf("event type is %d bytes, at most %d", len(ev.EventType), maxHeaderValue)}
	}
	if len(ev.AggregateID) > maxHeaderValue {
		return Event{}, &Invalid{ReasonInvalidField, fmt.Sprintf("aggregate id is %d bytes, at most %d", len(ev.AggregateID), maxHeaderValue)}
	}
	return ev, nil
}

// decodeCloudEvent makes the Event of a structured CloudEvent (binary ones were rebuilt
// as structured): see cloudevents.go.
func decodeCloudEvent(fields map[string]json.RawMessage, body []byte, header func(string) string) (Event, error) {
	id, typ, subject, err := cloudEvent(fields)
	if err != nil {
		return Event{}, err
	}
	ev := Event{ID: id, EventType: typ, AggregateID: subject, Payload: body}
	if ev.AggregateID == "" {
		if v := header(HeaderAggregateID); !storable(v) {
			return Event{}, &Invalid{ReasonInvalidHeader, fmt.Sprintf("header %s must be valid UTF-8 without NUL and at most %d bytes", HeaderAggregateID, maxHeaderValue)}
		} else {
			ev.AggregateID = v
		}
	}
	if ev.AggregateID == "" {
		ev.AggregateID = id
	}
	if len(ev.EventType) > maxHeaderValue {
		return Event{}, &Invalid{ReasonInvalidField, fmt.Sprintf("CloudEvent type is %d bytes, at most %d", len(ev.EventType), maxHeaderValue)}
	}
	if len(ev.AggregateID) > maxHeaderValue {
		return Event{}, &Invalid{ReasonInvalidField, fmt.Sprintf("CloudEvent subject is %d bytes, at most %d", len(ev.AggregateID), maxHeaderValue)}
	}
	return ev, nil
}

// storable reports whether a header value fits a TEXT column: PostgreSQL refuses NUL.
func storable(v string) bool {
	return len(v) <= maxHeaderValue && utf8.ValidString(v) && !strings.ContainsRune(v, 0)
}

// containsNUL reports whether a decoded string or key of the JSON document holds NUL,
// which JSONB refuses. The raw text alone cannot tell: `"\\u0000"` is an escaped
// backslash followed by "u0000", which JSONB stores fine.
func containsNUL(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false // not JSON: the caller reports that
		}
		if s, ok := tok.(string); ok && strings.ContainsRune(s, 0) {
			return true
		}
	}
}

// eventID reads the event id from where src says and returns the journal id for it.
func eventID(fields map[string]json.RawMessage, header func(string) string, src IDSource) (string, error) {
	if src.header != "" {
		v := header(src.header)
		if v == "" {
			return "", &Invalid{ReasonMissingID, fmt.Sprintf("message has no %s header (the configured id source)", Truncate(src.header, 64))}
		}
		if err := checkKey(v, "header "+Truncate(src.header, 64)); err != nil {
			return "", err
		}
		return JournalID(v), nil
	}
	name := src.fieldName()
	raw, ok := fields[name]
	if !ok {
		return "", &Invalid{ReasonMissingID, fmt.Sprintf("payload has no %q field", Truncate(name, 64))}
	}
	id, err := unquote(raw)
	if err != nil {
		return "", &Invalid{ReasonInvalidID, fmt.Sprintf("%q must be a string, got %s", Truncate(name, 64), Truncate(string(raw), 64))}
	}
	if err := checkKey(id, fmt.Sprintf("%q", Truncate(name, 64))); err != nil {
		return "", err
	}
	return JournalID(id), nil
}

func stringField(fields map[string]json.RawMessage, name string) string {
	raw, ok := fields[name]
	if !ok {
		return ""
	}
	s, err := unquote(raw)
	if err != nil {
		return ""
	}
	return s
}

// CanonicalUUID accepts the textual UUID forms that both PostgreSQL and CockroachDB cast
// to UUID the same way (hyphenated, optionally braced, any case) and returns the
// lower-case hyphenated form. It is deliberately stricter than the databases, so that
// the journal's computed primary key can never fail to cast inside a batch.
func CanonicalUUID(s string) (string, bool) {
	if len(s) == 38 && s[0] == '{' && s[37] == '}' {
		s = s[1:37]
	}
	if len(s) != 36 {
		return "", false
	}
	var b [36]byte
	for i := 0; i < 36; i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return "", false
			}
		default:
			switch {
			case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
			case c >= 'A' && c <= 'F':
				c += 'a' - 'A'
			default:
				return "", false
			}
		}
		b[i] = c
	}
	return string(b[:]), true
}

// QuarantineID derives the quarantine row id from what makes a bad message unique, so
// a redelivered bad message is recorded once. It is a UUIDv8 built from SHA-256.
func QuarantineID(reason Reason, destination string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(reason))
	h.Write([]byte{0})
	h.Write([]byte(destination))
	h.Write([]byte{0})
	h.Write(body)
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = (b[6] & 0x0f) | 0x80 // version 8: custom, here SHA-256 based
	return format(b)
}

// Truncate shortens s to at most n bytes plus an ellipsis, cutting on a rune boundary,
// so that a value quoted in an error or a log line stays bounded and valid UTF-8.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
