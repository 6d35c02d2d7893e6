package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

// refDecode is Decode as it was before rows were streamed (whole body, a map per row),
// kept as the reference that the streaming decoder is fuzzed against
// (FuzzDecodeMatchesReference).
func refDecode(body []byte) (Message, error) {
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
			m.Rows[i] = refDecodeRow(raw)
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

func refDecodeRow(raw json.RawMessage) Row {
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
		jr, err := refJournalRow(fields, r.Key)
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
	jr, err := refJournalRow(cols, r.Key)
	if err != nil {
		r.Err = err
		return r
	}
	r.Journal = jr
	return r
}

// journalRow reads the journal columns out of a row's JSON. The id comes from the "id"
// column, else from the key (["<id>"]) when a CDC query did not project it.
func refJournalRow(cols map[string]json.RawMessage, key json.RawMessage) (*JournalRow, error) {
	var jr JournalRow
	var id string
	if _, ok := cols["id"]; !ok {
		var k []string
		if json.Unmarshal(key, &k) != nil || len(k) != 1 {
			return nil, errors.New("no \"id\" column and no [\"<id>\"] key")
		}
		id = k[0]
	} else if err := refUnmarshalField(cols, "id", &id); err != nil {
		return nil, err
	}
	canon, ok := message.CanonicalUUID(id)
	if !ok {
		return nil, fmt.Errorf("column \"id\" is %q, not a UUID", message.Truncate(id, 48))
	}
	jr.ID = canon
	var status string
	for name, dst := range map[string]*string{"status": &status, "event_type": &jr.EventType, "aggregate_id": &jr.AggregateID} {
		if _, ok := cols[name]; ok {
			if err := refUnmarshalField(cols, name, dst); err != nil {
				return nil, err
			}
		}
	}
	jr.Status = journal.Status(status)
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

func refUnmarshalField(cols map[string]json.RawMessage, name string, dst *string) error {
	raw, ok := cols[name]
	if !ok {
		return fmt.Errorf("column %q is missing", name)
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("column %q is %s, not a string", name, message.Truncate(string(raw), 32))
	}
	return nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

// FuzzDecodeMatchesReference holds the streaming decoder to the one it replaced: the
// same bodies refused, the same rows, each poison for the same reason (the envelope's
// and the string columns' errors are worded differently, or checked in another order).
// The one body it refuses that the old decoder took names "payload" twice. It also
// scans arbitrary bytes as a row: the scanner must never read out of bounds.
func FuzzDecodeMatchesReference(f *testing.F) {
	row := func(s string) string { return `{"payload":[` + s + `],"length":1}` }
	for _, s := range []string{
		`{"payload":[{"after":{"id":"` + uuid1 + `","status":"RECEIVED","aggregate_id":"a","sequence_no":7,"event_type":"e","next_attempt_at":"2026-11-23T06:53:00.123456Z"},"key":["` + uuid1 + `"],"topic":"journal","updated":"1.0"}],"length":1}`,
		row(`{"__crdb__":{"key":["` + uuid1 + `"],"topic":"journal","updated":"1.0000000001"},"id":"` + uuid1 + `","status":"FAILED","aggregate_id":"b","sequence_no":"9"}`),
		row(`{"__crdb__":{"key":["` + uuid1 + `"]},"status":"RECEIVED"}`),
		row(`{"__crdb__":null,"id":"{` + uuid1 + `}"}`),
		row(`{"__crdb__":"x"}`), row(`{"__crdb__":{"resolved":5}}`), row(`{"__crdb__":{"Topic":null,"TOPIC":"t"},"id":null}`),
		row(`{"after":null,"key":null,"topic":null}`), row(`{"after":null,"Topic":5}`), row(`{"after":{},"key":[null]}`),
		row(`{"after":{},"key":["` + uuid1 + `","x"]}`), row(`{"after":{},"\u212Aey":["` + uuid1 + `"]}`),
		row(`{"\u0061fter":{"\u0069d":"` + uuid1 + `","st\u0061tus":"PROCESSED"}}`),
		row(`{"after":{"id":"` + uuid1 + `","id":"x"}}`), row(`{"after":{"id":"` + uuid1 + `","sequence_no":1.5}}`),
		row(`{"after":{"id":"` + uuid1 + `","status":7,"event_type":[],"aggregate_id":{}}}`),
		row(`{"after":{"id":"` + uuid1 + `","aggregate_id":"\ud800\udc00\ud800x\u00e9\"\\\/\b\f\n\r\t"}}`),
		row(`{"after":{"id":"` + uuid1 + `","event_type":"` + "\xff\xfe" + `"}}`),
		row(`{"after":{"id":"` + uuid1 + `","sequence_no":"\"12\""}}`), row(`{"after":{"id":"` + uuid1 + `","next_attempt_at":5}}`),
		row(`5`), row(`null`), row(`"x"`), row(`[]`), row(`{}`), row(` { "after" : "x" } `),
		`{"payload":[],"payload":[{}]}`, `{"length":1,"payload":[{}]}`, `{"payload":[],"length":"0"}`, `{"payload":[],"length":null}`,
		`{"resolved":"1.0","payload":[]}`, `{"resolved":null}`, `{"__crdb__":5,"resolved":"1.0"}`, `{"x":[1,{"y":"]"}],"resolved":"2.0"}`,
		`{"payload":[]} `, `{"payload":[]} {}`, `{"payload":[]} x`, ``, ` `, `{`, `{"payload":[{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		(&rowDecoder{}).decode(body) // any bytes: no panic

		got, err := Decode(body)
		want, refErr := refDecode(body)
		switch {
		case err != nil && !errors.Is(err, ErrMalformed):
			t.Fatalf("error %v does not wrap ErrMalformed", err)
		case refErr != nil && err == nil:
			t.Fatalf("accepted a body the reference refuses (%v): %q", refErr, body)
		case refErr == nil && err != nil:
			if !strings.Contains(err.Error(), "appears twice") {
				t.Fatalf("refused a body the reference accepts: %v: %q", err, body)
			}
			return
		case err != nil:
			return
		}
		if got.Resolved != want.Resolved || len(got.Rows) != len(want.Rows) {
			t.Fatalf("got resolved %v, %d rows; want %v, %d rows", got.Resolved, len(got.Rows), want.Resolved, len(want.Rows))
		}
		for i := range got.Rows {
			g, w := got.Rows[i], want.Rows[i]
			if g.Deleted != w.Deleted || string(g.Key) != string(w.Key) || g.Topic != w.Topic || g.Updated != w.Updated ||
				(g.Journal == nil) != (w.Journal == nil) || (g.Journal != nil && *g.Journal != *w.Journal) {
				t.Fatalf("row %d:\ngot  %+v %+v\nwant %+v %+v", i, g, g.Journal, w, w.Journal)
			}
			if (g.Err == nil) != (w.Err == nil) {
				t.Fatalf("row %d: err %v, want %v", i, g.Err, w.Err)
			}
			if g.Err == nil {
				continue
			}
			ge, we := g.Err.Error(), w.Err.Error()
			switch {
			case strings.HasPrefix(we, "wrapped message:"), strings.HasPrefix(we, "bare message:"):
				if !strings.HasPrefix(ge, we[:strings.Index(we, ":")+1]) {
					t.Fatalf("row %d: err %q, want one like %q", i, ge, we)
				}
			case strings.HasSuffix(we, "not a string") && !strings.HasPrefix(we, `column "id"`):
				// The reference checks status, event_type and aggregate_id in map order.
				if !strings.HasSuffix(ge, "not a string") {
					t.Fatalf("row %d: err %q, want one like %q", i, ge, we)
				}
			case ge != we:
				t.Fatalf("row %d: err %q, want %q", i, ge, we)
			}
		}
	})
}

const uuid1 = "d7b18299-c0c4-4304-9ef7-05ae46fd5ee1"
