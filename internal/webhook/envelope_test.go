package webhook_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/webhook"
)

const id1 = "d7b18299-c0c4-4304-9ef7-05ae46fd5ee1"

func TestDecode(t *testing.T) {
	t.Parallel()
	type rowWant struct {
		id, agg string
		status  journal.Status
		seq     int64
		deleted bool
		err     string
	}
	tests := []struct {
		name     string
		body     string
		rows     []rowWant
		resolved string
		err      string
	}{
		{name: "wrapped batch",
			body: `{"payload":[{"after":{"id":"` + id1 + `","status":"RECEIVED","aggregate_id":"a","sequence_no":7,"event_type":"registration","payload":{"id":"x"}},"key":["` + id1 + `"],"topic":"journal","updated":"1629813621680097993.0000000000"}],"length":1}`,
			rows: []rowWant{{id: id1, status: "RECEIVED", agg: "a", seq: 7}}},
		{name: "wrapped delete", body: `{"payload":[{"after":null,"key":["` + id1 + `"],"topic":"journal","updated":"1.0"}],"length":1}`,
			rows: []rowWant{{deleted: true}}},
		{name: "bare batch (CDC query)",
			body: `{"payload":[{"__crdb__":{"key":["` + id1 + `"],"topic":"journal","updated":"1.0000000001"},"id":"` + id1 + `","status":"FAILED","aggregate_id":"b","sequence_no":"9"}],"length":1}`,
			rows: []rowWant{{id: id1, status: "FAILED", agg: "b", seq: 9}}},
		{name: "bare row without id column takes the key",
			body: `{"payload":[{"__crdb__":{"key":["` + strings.ToUpper(id1) + `"]},"status":"RECEIVED"}],"length":1}`,
			rows: []rowWant{{id: id1, status: "RECEIVED"}}},
		{name: "poison rows do not fail the batch",
			body: `{"payload":[5,{"after":"x"},{"after":{"id":"nope"}},{"after":{"id":7}},{"after":{"id":"` + id1 + `","sequence_no":"x"}},{"other":1}],"length":6}`,
			rows: []rowWant{{err: "not a JSON object"}, {err: `"after" is not`}, {err: "not a UUID"}, {err: "not a string"}, {err: "not an integer"}, {err: "neither"}}},
		{name: "empty batch", body: `{"payload":[],"length":0}`, rows: []rowWant{}},
		{name: "resolved", body: `{"resolved":"1629813621680097993.0000000002"}`, resolved: "1629813621680097993.0000000002"},
		{name: "bare resolved", body: `{"__crdb__":{"resolved":"1629813621680097993.0000000000"}}`, resolved: "1629813621680097993.0000000000"},
		{name: "not json", body: `{"payload":`, err: "not a JSON object"},
		{name: "array", body: `[1]`, err: "not a JSON object"},
		{name: "null", body: `null`, err: "null"},
		{name: "unknown object", body: `{"hello":1}`, err: "neither a batch"},
		{name: "payload not array", body: `{"payload":{},"length":1}`, err: `"payload" is not an array`},
		{name: "payload null", body: `{"payload":null}`, err: `"payload" is not an array`},
		{name: "length mismatch", body: `{"payload":[],"length":2}`, err: `"length" is 2`},
		{name: "resolved garbage", body: `{"resolved":"yesterday"}`, err: "not an HLC"},
		{name: "resolved zero", body: `{"resolved":"0.0"}`, err: "zero"},
		{name: "resolved number", body: `{"resolved":5}`, err: "not a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := webhook.Decode([]byte(tt.body))
			if tt.err != "" {
				if err == nil || !errors.Is(err, webhook.ErrMalformed) || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want ErrMalformed containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.resolved != "" {
				if m.Resolved.String() != tt.resolved || len(m.Rows) != 0 {
					t.Fatalf("resolved = %s, rows %d", m.Resolved, len(m.Rows))
				}
				return
			}
			if len(m.Rows) != len(tt.rows) {
				t.Fatalf("rows = %d, want %d", len(m.Rows), len(tt.rows))
			}
			for i, w := range tt.rows {
				r := m.Rows[i]
				switch {
				case w.err != "":
					if r.Err == nil || !strings.Contains(r.Err.Error(), w.err) {
						t.Errorf("row %d: err = %v, want %q", i, r.Err, w.err)
					}
				case w.deleted:
					if !r.Deleted || r.Journal != nil {
						t.Errorf("row %d: %+v, want deleted", i, r)
					}
				default:
					if r.Err != nil || r.Journal == nil {
						t.Fatalf("row %d: %+v", i, r)
					}
					j := r.Journal
					if j.ID != w.id || j.Status != w.status || j.AggregateID != w.agg || j.SequenceNo != w.seq {
						t.Errorf("row %d: %+v, want %+v", i, *j, w)
					}
				}
			}
		})
	}
}

// failingReader yields its text, then err.
type failingReader struct {
	text string
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.text == "" {
		return 0, f.err
	}
	n := copy(p, f.text)
	f.text = f.text[n:]
	return n, nil
}

// DecodeStream hands rows over as it reads them; a failed read is reported as such,
// not as a malformed body.
func TestDecodeStream(t *testing.T) {
	t.Parallel()
	batch := `{"payload":[{"after":null},7,{"after":{"id":"` + id1 + `"}}],"length":3}`
	var rows []webhook.Row
	h, err := webhook.DecodeStream(strings.NewReader(batch), func(r webhook.Row) { rows = append(rows, r) })
	if err != nil || !h.IsZero() || len(rows) != 3 || !rows[0].Deleted || rows[1].Err == nil || rows[2].Journal == nil || rows[2].Journal.ID != id1 {
		t.Fatalf("DecodeStream = %v, %v, rows %+v", h, err, rows)
	}

	cut := errors.New("connection reset")
	rows = nil
	_, err = webhook.DecodeStream(&failingReader{text: batch[:40], err: cut}, func(r webhook.Row) { rows = append(rows, r) })
	if !errors.Is(err, cut) || errors.Is(err, webhook.ErrMalformed) {
		t.Errorf("err = %v, want the read error, not ErrMalformed", err)
	}
	if len(rows) != 2 { // the delete and the 7, which the failed read cut off from the third
		t.Errorf("%d rows handed over before the read failed, want 2", len(rows))
	}

	h, err = webhook.DecodeStream(strings.NewReader(`{"resolved":"1629813621680097993.0000000002"}`), func(webhook.Row) { t.Error("row from a resolved message") })
	if err != nil || h.String() != "1629813621680097993.0000000002" {
		t.Errorf("resolved = %v, %v", h, err)
	}
}

func TestParseHLC(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		ok   bool
		want string
	}{
		{"1629813621680097993.0000000000", true, "1629813621680097993.0000000000"},
		{"1629813621680097993.0000000012", true, "1629813621680097993.0000000012"},
		{"1629813621680097993", true, "1629813621680097993.0000000000"},
		{"", false, ""}, {".1", false, ""}, {"1.", false, ""}, {"-1.0", false, ""}, {"1e9", false, ""},
		{"99999999999999999999.0", false, ""}, {"1.99999999999", false, ""}, {"1.9999999999", false, ""},
	} {
		h, err := webhook.ParseHLC(tt.in)
		if (err == nil) != tt.ok || (tt.ok && h.String() != tt.want) {
			t.Errorf("ParseHLC(%q) = %v, %v", tt.in, h, err)
		}
	}
	a, _ := webhook.ParseHLC("5.0000000001")
	b, _ := webhook.ParseHLC("5.0000000002")
	c, _ := webhook.ParseHLC("6.0")
	if !a.Less(b) || !b.Less(c) || c.Less(a) || a.Less(a) {
		t.Error("HLC order wrong")
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"payload":[{"after":{"id":"` + id1 + `","status":"RECEIVED","sequence_no":1},"key":["` + id1 + `"],"topic":"journal","updated":"1.0"}],"length":1}`,
		`{"payload":[{"__crdb__":{"key":["` + id1 + `"],"updated":"1.0"},"id":"` + id1 + `","status":"RECEIVED"}],"length":1}`,
		`{"payload":[{"after":null}],"length":1}`,
		`{"resolved":"1629813621680097993.0000000000"}`,
		`{"__crdb__":{"resolved":"1.0"}}`,
		`{"payload":[1,"x",null,{}],"length":4}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := webhook.Decode(body)
		if err != nil {
			if !errors.Is(err, webhook.ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if !m.Resolved.IsZero() {
			if len(m.Rows) != 0 {
				t.Fatal("both rows and resolved")
			}
			if _, err := webhook.ParseHLC(m.Resolved.String()); err != nil {
				t.Fatalf("resolved %v does not round-trip: %v", m.Resolved, err)
			}
			return
		}
		for _, r := range m.Rows {
			n := 0
			if r.Err != nil {
				n++
			}
			if r.Deleted {
				n++
			}
			if r.Journal != nil {
				n++
				if len(r.Journal.ID) != 36 {
					t.Fatalf("accepted id %q", r.Journal.ID)
				}
			}
			if n != 1 {
				t.Fatalf("row is not exactly one of poison, deleted, journal: %+v", r)
			}
		}
		// Whatever decoded as a batch must re-encode as one.
		var b webhook.Batch
		if json.Unmarshal(body, &b) != nil {
			t.Fatalf("Decode accepted a batch encoding/json rejects: %q", body)
		}
	})
}
