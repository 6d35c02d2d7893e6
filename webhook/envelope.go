package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

// Batch is the body of a webhook POST carrying rows: the webhook sink always wraps
// messages in {"payload": [...], "length": N}, whatever the envelope of each message.
//
// https://www.cockroachlabs.com/docs/stable/changefeed-sinks#webhook-sink
// https://www.cockroachlabs.com/docs/stable/changefeed-message-envelopes ("payload")
type Batch struct {
	Payload []json.RawMessage `json:"payload"`
	Length  int               `json:"length"`
}

// WrappedRow is one message of the default "wrapped" envelope.
//
//	{"after":{...},"key":["<id>"],"topic":"journal","updated":"1629813621680097993.0000000000"}
//
// after is null for a delete (row-level TTL deletes included).
// https://www.cockroachlabs.com/docs/stable/changefeed-messages
type WrappedRow struct {
	After   json.RawMessage `json:"after"`
	Key     json.RawMessage `json:"key,omitempty"`
	Topic   string          `json:"topic,omitempty"`
	Updated string          `json:"updated,omitempty"`
}

// CRDBMeta is the "__crdb__" object of the "bare" envelope, the default of CDC queries
// (CREATE CHANGEFEED ... AS SELECT): the row's columns are the message's top-level
// fields and the metadata sits in "__crdb__"; key and topic are there because the
// webhook sink forces key_in_value and topic_in_value.
//
//	{"__crdb__":{"key":["<id>"],"topic":"journal","updated":"..."},"id":"<id>","status":"RECEIVED",...}
//
// A resolved message in that envelope is {"__crdb__":{"resolved":"..."}}.
// https://www.cockroachlabs.com/docs/stable/changefeed-message-envelopes#bare
// https://www.cockroachlabs.com/docs/stable/cdc-queries
type CRDBMeta struct {
	Key      json.RawMessage `json:"key,omitempty"`
	Topic    string          `json:"topic,omitempty"`
	Updated  string          `json:"updated,omitempty"`
	Resolved string          `json:"resolved,omitempty"`
}

// ResolvedMessage is the body of a resolved-timestamp POST in the wrapped envelope. It
// is not wrapped in a batch: the body is just {"resolved":"<HLC>"}.
type ResolvedMessage struct {
	Resolved string `json:"resolved"`
}

// crdbField is the bare envelope's metadata key.
const crdbField = "__crdb__"

// HLC is a CockroachDB hybrid logical clock timestamp as rendered in changefeed
// messages: "<wall time nanoseconds>.<logical, 10 digits>".
type HLC struct {
	WallTime int64 // nanoseconds since the Unix epoch
	Logical  int32
}

// ParseHLC parses "<digits>[.<digits>]".
func ParseHLC(s string) (HLC, error) {
	wall, logical, hasDot := strings.Cut(s, ".")
	if wall == "" || len(wall) > 19 || !allDigits(wall) || (hasDot && (logical == "" || len(logical) > 10 || !allDigits(logical))) {
		return HLC{}, fmt.Errorf("%q is not an HLC timestamp (<nanoseconds>.<logical>)", message.Truncate(s, 48))
	}
	w, err := strconv.ParseInt(wall, 10, 64)
	if err != nil {
		return HLC{}, fmt.Errorf("%q is not an HLC timestamp: %w", message.Truncate(s, 48), err)
	}
	var l int64
	if hasDot {
		if l, err = strconv.ParseInt(logical, 10, 32); err != nil {
			return HLC{}, fmt.Errorf("%q is not an HLC timestamp: %w", message.Truncate(s, 48), err)
		}
	}
	return HLC{WallTime: w, Logical: int32(l)}, nil
}

// String renders the HLC the way CockroachDB does.
func (h HLC) String() string { return fmt.Sprintf("%d.%010d", h.WallTime, h.Logical) }

// Time is the wall time.
func (h HLC) Time() time.Time { return time.Unix(0, h.WallTime).UTC() }

// IsZero reports the zero HLC.
func (h HLC) IsZero() bool { return h == HLC{} }

// Less orders HLCs.
func (h HLC) Less(o HLC) bool {
	return h.WallTime < o.WallTime || (h.WallTime == o.WallTime && h.Logical < o.Logical)
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// Message is a decoded webhook body: either rows or a resolved timestamp.
type Message struct {
	Rows     []Row
	Resolved HLC // non-zero for a resolved message
}

// Row is one changefeed message about a journal row.
type Row struct {
	Key     json.RawMessage
	Topic   string
	Updated string
	// Deleted: after is null (a delete, e.g. by row-level TTL).
	Deleted bool
	// Journal is the row's columns; nil when Deleted or when Err is set.
	Journal *JournalRow
	// Err says why the message is unusable (a poison row). The batch is still valid.
	Err error
}

// JournalRow holds the journal columns the webhook uses. Missing columns stay zero
// (a CDC query may project fewer columns); only the id is required.
type JournalRow struct {
	ID          string
	Status      string // "" when not projected
	EventType   string
	AggregateID string
	SequenceNo  int64
	// NextAttemptAt is zero when absent or in a format not understood.
	NextAttemptAt time.Time
}

// ErrMalformed is wrapped by every Decode error.
var ErrMalformed = errors.New("malformed changefeed message")

// Decode parses a webhook body: a batch of rows in the wrapped or the bare envelope,
// or a resolved message in either. The error (wrapping ErrMalformed) is for a body
// that is none of these; a batch with unusable rows is valid, with Row.Err set on them.
func Decode(body []byte) (Message, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return Message{}, fmt.Errorf("%w: body is not a JSON object: %v", ErrMalformed, err)
	}
	if top == nil {
		return Message{}, fmt.Errorf("%w: body is JSON null", ErrMalformed)
	}
	if raw, ok := top["payload"]; ok {
		var b Batch
		if err := json.Unmarshal(raw, &b.Payload); err != nil || isNull(raw) {
			return Message{}, fmt.Errorf("%w: \"payload\" is not an array", ErrMalformed)
		}
		if rawLen, ok := top["length"]; ok {
			if err := json.Unmarshal(rawLen, &b.Length); err != nil {
				return Message{}, fmt.Errorf("%w: \"length\" is not an integer", ErrMalformed)
			}
			if b.Length != len(b.Payload) {
				return Message{}, fmt.Errorf("%w: \"length\" is %d but \"payload\" has %d messages", ErrMalformed, b.Length, len(b.Payload))
			}
		}
		m := Message{Rows: make([]Row, len(b.Payload))}
		for i, raw := range b.Payload {
			m.Rows[i] = decodeRow(raw)
		}
		return m, nil
	}
	resolved := ""
	if raw, ok := top["resolved"]; ok {
		if err := json.Unmarshal(raw, &resolved); err != nil {
			return Message{}, fmt.Errorf("%w: \"resolved\" is not a string", ErrMalformed)
		}
	} else if raw, ok := top[crdbField]; ok {
		var meta CRDBMeta
		if err := json.Unmarshal(raw, &meta); err != nil || meta.Resolved == "" {
			return Message{}, fmt.Errorf("%w: a bare message outside a batch must be {\"__crdb__\":{\"resolved\":...}}", ErrMalformed)
		}
		resolved = meta.Resolved
	} else {
		return Message{}, fmt.Errorf("%w: neither a batch (\"payload\") nor a resolved message", ErrMalformed)
	}
	h, err := ParseHLC(resolved)
	if err != nil {
		return Message{}, fmt.Errorf("%w: resolved: %v", ErrMalformed, err)
	}
	if h.IsZero() {
		return Message{}, fmt.Errorf("%w: resolved timestamp is zero", ErrMalformed)
	}
	return Message{Resolved: h}, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// Poison-row errors without details are shared, so that a batch of a million of them
// allocates none.
var (
	errRowNotObject   = errors.New("message is not a JSON object")
	errRowNoEnvelope  = fmt.Errorf("message has neither \"after\" nor %q", crdbField)
	errAfterNotObject = errors.New("\"after\" is not a JSON object")
)

func decodeRow(raw json.RawMessage) Row {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return Row{Err: errRowNotObject}
	}
	var r Row
	var after json.RawMessage
	if a, ok := fields["after"]; ok {
		var w WrappedRow
		if err := json.Unmarshal(raw, &w); err != nil {
			return Row{Err: fmt.Errorf("wrapped message: %v", err)}
		}
		r.Key, r.Topic, r.Updated = w.Key, w.Topic, w.Updated
		if isNull(a) {
			r.Deleted = true
			return r
		}
		after = a
	} else if metaRaw, ok := fields[crdbField]; ok {
		var meta CRDBMeta
		if err := json.Unmarshal(metaRaw, &meta); err != nil {
			return Row{Err: fmt.Errorf("bare message: %q: %v", crdbField, err)}
		}
		r.Key, r.Topic, r.Updated = meta.Key, meta.Topic, meta.Updated
		delete(fields, crdbField)
		jr, err := journalRow(fields, r.Key)
		if err != nil {
			r.Err = err
			return r
		}
		r.Journal = jr
		return r
	} else {
		return Row{Err: errRowNoEnvelope}
	}
	var cols map[string]json.RawMessage
	if err := json.Unmarshal(after, &cols); err != nil || cols == nil {
		r.Err = errAfterNotObject
		return r
	}
	jr, err := journalRow(cols, r.Key)
	if err != nil {
		r.Err = err
		return r
	}
	r.Journal = jr
	return r
}

// journalRow reads the journal columns out of a row's JSON. The id comes from the "id"
// column, else from the key (["<id>"]) when a CDC query did not project it.
func journalRow(cols map[string]json.RawMessage, key json.RawMessage) (*JournalRow, error) {
	var jr JournalRow
	var id string
	if _, ok := cols["id"]; !ok {
		var k []string
		if json.Unmarshal(key, &k) != nil || len(k) != 1 {
			return nil, errors.New("no \"id\" column and no [\"<id>\"] key")
		}
		id = k[0]
	} else if err := unmarshalField(cols, "id", &id); err != nil {
		return nil, err
	}
	canon, ok := message.CanonicalUUID(id)
	if !ok {
		return nil, fmt.Errorf("column \"id\" is %q, not a UUID", message.Truncate(id, 48))
	}
	jr.ID = canon
	for name, dst := range map[string]*string{"status": &jr.Status, "event_type": &jr.EventType, "aggregate_id": &jr.AggregateID} {
		if _, ok := cols[name]; ok {
			if err := unmarshalField(cols, name, dst); err != nil {
				return nil, err
			}
		}
	}
	if raw, ok := cols["sequence_no"]; ok && !isNull(raw) {
		// INT8 is a JSON number; accept a string too, as some encoders quote 64-bit ints.
		s := strings.Trim(string(bytes.TrimSpace(raw)), `"`)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("column \"sequence_no\" is %s, not an integer", message.Truncate(string(raw), 32))
		}
		jr.SequenceNo = n
	}
	if raw, ok := cols["next_attempt_at"]; ok && !isNull(raw) {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			jr.NextAttemptAt = parseTimestamp(s)
		}
	}
	return &jr, nil
}

func unmarshalField(cols map[string]json.RawMessage, name string, dst *string) error {
	raw, ok := cols[name]
	if !ok {
		return fmt.Errorf("column %q is missing", name)
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("column %q is %s, not a string", name, message.Truncate(string(raw), 32))
	}
	return nil
}

// parseTimestamp reads a TIMESTAMPTZ as PostgreSQL's and CockroachDB's JSON render it;
// zero if it cannot.
func parseTimestamp(s string) time.Time {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999Z07"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// pending reports whether the row may be work: RECEIVED, or FAILED, or unknown
// (status not projected), per the journal's statuses.
func (jr *JournalRow) pending() bool {
	switch jr.Status {
	case journal.StatusReceived, journal.StatusFailed, "":
		return true
	}
	return false
}
