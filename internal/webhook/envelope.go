package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
//	{"__crdb__":{"key":["<id>"],"topic":"journal","updated":"..."},"id":"<id>","aggregate_id":"…",...}
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
	Status      journal.Status // "" when not projected
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
// It holds every row at once; DecodeStream does not.
func Decode(body []byte) (Message, error) {
	var m Message
	resolved, err := DecodeStream(bytes.NewReader(body), func(r Row) { m.Rows = append(m.Rows, r) })
	if err != nil {
		return Message{}, err
	}
	m.Resolved = resolved
	return m, nil
}

// DecodeStream is Decode reading the body from r and handing each row of a batch to
// row as soon as it is decoded, so that memory does not grow with the number of rows.
// It returns the resolved timestamp of a resolved message, zero for a batch.
//
// Rows are handed over before the rest of the body is read: act on them only once
// DecodeStream has returned nil, as a body malformed after its rows is refused whole.
// An error reading r is returned wrapped (errors.Is and errors.As reach it), not as
// ErrMalformed. Unlike encoding/json, a body naming "payload" twice is refused rather
// than decoded as its last one, whose rows would be known only at the end.
func DecodeStream(r io.Reader, row func(Row)) (HLC, error) {
	return decodeStream(r, row, &rowDecoder{})
}

// errReader remembers the first error of r other than io.EOF, to tell a failed read
// from a malformed body.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

func decodeStream(r io.Reader, row func(Row), rd *rowDecoder) (HLC, error) {
	er := &errReader{r: r}
	h, err := decodeBody(json.NewDecoder(er), row, rd)
	if err != nil && er.err != nil {
		return HLC{}, fmt.Errorf("reading body: %w", er.err)
	}
	return h, err
}

// decodeBody reads the top-level object member by member, the payload array element
// by element. It decodes what the former json.Unmarshal into a map decoded: exact
// names, "payload" first whatever the order, the last of other duplicate names.
func decodeBody(dec *json.Decoder, row func(Row), rd *rowDecoder) (HLC, error) {
	tok, err := dec.Token()
	if err != nil {
		return HLC{}, notJSON(err)
	}
	if tok == nil {
		return HLC{}, fmt.Errorf("%w: body is JSON null", ErrMalformed)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return HLC{}, fmt.Errorf("%w: body is not a JSON object", ErrMalformed)
	}
	var (
		inBatch                bool
		rows                   int
		length                 int
		hasLength, hasResolved bool
		lengthErr, resolvedErr error
		resolved               string
		meta                   CRDBMeta
		hasMeta                bool
		metaErr                error
		raw, skip              json.RawMessage // reused: one row, one skipped value
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return HLC{}, notJSON(err)
		}
		name, _ := tok.(string)
		switch name {
		case "payload":
			if inBatch {
				return HLC{}, fmt.Errorf("%w: \"payload\" appears twice", ErrMalformed)
			}
			inBatch = true
			tok, err := dec.Token()
			if err != nil {
				return HLC{}, notJSON(err)
			}
			if d, ok := tok.(json.Delim); !ok || d != '[' {
				return HLC{}, fmt.Errorf("%w: \"payload\" is not an array", ErrMalformed)
			}
			for dec.More() {
				if err := dec.Decode(&raw); err != nil {
					return HLC{}, notJSON(err)
				}
				row(rd.decode(raw))
				rows++
			}
			if _, err := dec.Token(); err != nil { // ]
				return HLC{}, notJSON(err)
			}
		case "length":
			hasLength, length = true, 0
			if lengthErr, err = decodeValue(dec, &length); err != nil {
				return HLC{}, err
			}
		case "resolved":
			hasResolved, resolved = true, ""
			if resolvedErr, err = decodeValue(dec, &resolved); err != nil {
				return HLC{}, err
			}
		case crdbField:
			hasMeta, meta = true, CRDBMeta{}
			if metaErr, err = decodeValue(dec, &meta); err != nil {
				return HLC{}, err
			}
		default:
			if err := dec.Decode(&skip); err != nil {
				return HLC{}, notJSON(err)
			}
		}
	}
	if _, err := dec.Token(); err != nil { // }
		return HLC{}, notJSON(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more JSON after the object")
		}
		return HLC{}, notJSON(err)
	}
	if inBatch {
		if hasLength {
			if lengthErr != nil {
				return HLC{}, fmt.Errorf("%w: \"length\" is not an integer", ErrMalformed)
			}
			if length != rows {
				return HLC{}, fmt.Errorf("%w: \"length\" is %d but \"payload\" has %d messages", ErrMalformed, length, rows)
			}
		}
		return HLC{}, nil
	}
	switch {
	case hasResolved:
		if resolvedErr != nil {
			return HLC{}, fmt.Errorf("%w: \"resolved\" is not a string", ErrMalformed)
		}
	case hasMeta:
		if metaErr != nil || meta.Resolved == "" {
			return HLC{}, fmt.Errorf("%w: a bare message outside a batch must be {\"__crdb__\":{\"resolved\":...}}", ErrMalformed)
		}
		resolved = meta.Resolved
	default:
		return HLC{}, fmt.Errorf("%w: neither a batch (\"payload\") nor a resolved message", ErrMalformed)
	}
	h, err := ParseHLC(resolved)
	if err != nil {
		return HLC{}, fmt.Errorf("%w: resolved: %v", ErrMalformed, err)
	}
	if h.IsZero() {
		return HLC{}, fmt.Errorf("%w: resolved timestamp is zero", ErrMalformed)
	}
	return h, nil
}

// decodeValue decodes the next value into v. A value of the wrong type is typeErr, to
// report only if the value turns out to matter; err is for a body that is not JSON.
func decodeValue(dec *json.Decoder, v any) (typeErr, err error) {
	err = dec.Decode(v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return err, nil
	}
	if err != nil {
		return nil, notJSON(err)
	}
	return nil, nil
}

// notJSON is the error for a body that is not (complete) JSON.
func notJSON(err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("%w: body is not a JSON object: %v", ErrMalformed, err)
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
func (jr *JournalRow) pending() bool { return jr.Status == "" || jr.Status.Pending() }
