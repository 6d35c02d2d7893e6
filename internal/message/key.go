package message

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// keyNamespace is the fixed namespace of the journal ids inboxd derives from event keys
// that are not UUIDs (RFC 9562 §5.5). Changing it would give every such event a new
// journal id, so that redeliveries after the change would no longer collapse: never
// change it.
var keyNamespace = [16]byte{0x6f, 0x1c, 0x4b, 0x52, 0x9d, 0x3e, 0x4a, 0x07, 0xb8, 0x21, 0x5e, 0x0a, 0x7c, 0x94, 0x3d, 0x11}

// KeyNamespace is keyNamespace as text: 6f1c4b52-9d3e-4a07-b821-5e0a7c943d11.
func KeyNamespace() string { return format(keyNamespace) }

// JournalID is the journal's primary key for an event key: a UUID key keeps its own
// (canonical) value, so journals written before any-id support and GET /journal/{id}
// are unchanged; any other key becomes the version-5 UUID of the key in keyNamespace,
// deterministic, so that every redelivery of the event lands on the same row.
func JournalID(key string) string {
	if canon, ok := CanonicalUUID(key); ok {
		return canon
	}
	return UUIDv5(keyNamespace, key)
}

// UUIDv5 is the name-based UUID of name in namespace (RFC 9562 §5.5: SHA-1 of the
// namespace's bytes then the name's, truncated to 16 bytes, version 5, RFC variant).
func UUIDv5(namespace [16]byte, name string) string {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(name))
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = (b[6] & 0x0f) | 0x50
	return format(b)
}

// maxKeyBytes bounds an event id that is not a UUID. It is hashed, not stored in a
// column, but it is quoted in errors and kept in the payload; 1 KiB is ample for any
// id scheme (a CloudEvents source is a URI-reference, also bounded by this).
const maxKeyBytes = 1024

// IDSource says where a message's event id comes from; its zero value is the payload's
// "id" field. CloudEvents are keyed by source and id whatever the IDSource (see cloudevents.go).
type IDSource struct {
	ceOnly bool   // only CloudEvents are events; anything else is missing_specversion
	header string // non-empty: the id is this STOMP header's value
	field  string // else the payload's top-level field (empty: "id")
}

// ParseIDSource reads the id-source setting: "payload:FIELD" (the payload's top-level
// FIELD, the default being "payload:id") or "header:NAME" (a STOMP header, for example
// "header:message-id", the JMS message id ActiveMQ sends as message-id), or
// "cloudevents": only CloudEvents are accepted (source + id), anything else is
// quarantined as missing_specversion.
func ParseIDSource(s string) (IDSource, error) {
	kind, name, ok := strings.Cut(s, ":")
	switch s {
	case "":
		return IDSource{}, nil
	case "cloudevents":
		return IDSource{ceOnly: true}, nil
	}
	if !ok || name == "" || len(name) > maxHeaderValue || !utf8.ValidString(name) || strings.ContainsAny(name, "\x00\r\n") {
		return IDSource{}, fmt.Errorf("id source %q: want payload:FIELD, header:NAME or cloudevents", Truncate(s, 64))
	}
	switch kind {
	case "payload":
		if name == "id" {
			return IDSource{}, nil
		}
		return IDSource{field: name}, nil
	case "header":
		return IDSource{header: name}, nil
	}
	return IDSource{}, fmt.Errorf("id source %q: want payload:FIELD, header:NAME or cloudevents", Truncate(s, 64))
}

// String is the setting that ParseIDSource reads back.
func (s IDSource) String() string {
	if s.ceOnly {
		return "cloudevents"
	}
	if s.header != "" {
		return "header:" + s.header
	}
	return "payload:" + s.fieldName()
}

func (s IDSource) fieldName() string {
	if s.field == "" {
		return "id"
	}
	return s.field
}

// checkKey validates an event id from outside: a non-empty string that a journal row
// and an error message can carry.
func checkKey(id, where string) error {
	switch {
	case id == "":
		return &Invalid{ReasonInvalidID, fmt.Sprintf("%s is empty", where)}
	case len(id) > maxKeyBytes:
		return &Invalid{ReasonInvalidID, fmt.Sprintf("%s is %d bytes, at most %d", where, len(id), maxKeyBytes)}
	case !utf8.ValidString(id) || strings.ContainsRune(id, 0):
		return &Invalid{ReasonInvalidID, fmt.Sprintf("%s must be valid UTF-8 without NUL", where)}
	}
	return nil
}

// EventKey is the event's own id as its publisher sent it, read back from a journal
// payload: the CloudEvent's id for a CloudEvent, else the payload field src names. It
// is "" when src reads a header, which the journal does not keep, or when the payload
// has no such string field.
func EventKey(payload []byte, src IDSource) string {
	if src.header != "" {
		return ""
	}
	if src.field == "" {
		// The default source reads two fields: no map of the whole payload per event.
		var p struct {
			ID          json.RawMessage `json:"id"`
			SpecVersion json.RawMessage `json:"specversion"`
		}
		if json.Unmarshal(payload, &p) != nil {
			return ""
		}
		var id string
		_ = json.Unmarshal(p.ID, &id)
		return id
	}
	fields, err := topLevelFields(payload)
	if err != nil {
		return ""
	}
	if _, ce := fields["specversion"]; ce {
		return stringField(fields, "id")
	}
	return stringField(fields, src.fieldName())
}
