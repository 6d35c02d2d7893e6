package message

import (
	"encoding/json"
	"errors"
	"maps"
	"testing"
)

// unmarshalFields is what topLevelFields replaces.
func unmarshalFields(body []byte) (map[string]json.RawMessage, error) {
	var fields map[string]json.RawMessage
	err := json.Unmarshal(body, &fields)
	if _, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		return nil, errNotObject
	}
	return fields, err
}

func sameFields(t *testing.T, body []byte) {
	t.Helper()
	got, gotErr := topLevelFields(body)
	want, wantErr := unmarshalFields(body)
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		t.Fatalf("%q: error %v, Unmarshal's %v", body, gotErr, wantErr)
	}
	if (got == nil) != (want == nil) {
		t.Fatalf("%q: fields %v, Unmarshal's %v", body, got, want)
	}
	if !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
		t.Fatalf("%q: fields %q, Unmarshal's %q", body, got, want)
	}
}

var fieldsCorpus = []string{
	`{}`, ` { } `, `null`, ` null `, `[]`, `"s"`, `1`, `true`, `false`, `{"a":1}`,
	`{"id":"x","type":"t","n":-1.5e3,"b":true,"f":false,"z":null}`,
	`{ "a" : { "b" : [1, {"c": "}"}, "]"] } , "d" : "\"}" }`,
	`{"a":1,"a":2}`, `{"a\u0062":1,"ab":2}`, `{"\ud800":1}`, `{"a\"b":"c\\"}`,
	`{"a":[[[[]]]],"b":{"c":{}}}`, "{\"a\":\t1\n,\r\"b\" :2}", `{"a":1,}`, `{"a" 1}`,
	`{"a":1}x`, `{"a":`, `{`, ``, ` `, `{"a":01}`, `{"a":"\x"}`, `{"é":"ü"}`,
	`{"data":{"id":"inner"},"id":"outer"}`, `{"a":1e}`, `{"a":tru}`, `{"a":nul}`, "{\"\xaa\":{}}",
}

func TestTopLevelFieldsIsUnmarshal(t *testing.T) {
	for _, body := range fieldsCorpus {
		sameFields(t, []byte(body))
	}
}

// FuzzTopLevelFields holds the decoder's hand-written scan to encoding/json on any
// input, valid or not.
func FuzzTopLevelFields(f *testing.F) {
	for _, body := range fieldsCorpus {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { sameFields(t, body) })
}

func BenchmarkTopLevelFields(b *testing.B) {
	body := []byte(`{"id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","type":"registration","email":"user1@example.com","name":"User 1","jurisdiction":"mga","registeredAt":"2026-11-28T10:00:00Z"}`)
	for _, bc := range []struct {
		name string
		fn   func([]byte) (map[string]json.RawMessage, error)
	}{{"scan", topLevelFields}, {"unmarshal", unmarshalFields}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := bc.fn(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	body := []byte(`{"id":"7c9e6679-7425-40de-944b-e07fc1f90ae7","type":"registration","email":"user1@example.com","name":"User 1","jurisdiction":"mga","registeredAt":"2026-11-28T10:00:00Z"}`)
	header := func(string) string { return "" }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(body, header, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzUnquote holds unquote to json.Unmarshal into a string.
func FuzzUnquote(f *testing.F) {
	for _, raw := range []string{`"a"`, `""`, `null`, `1`, `"a\"b"`, `"\u00e9"`, `"é"`, "\"\xff\"", `"a`, `true`, `{}`, "\"\x01\""} {
		f.Add([]byte(raw))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, gotErr := unquote(raw)
		var want string
		wantErr := json.Unmarshal(raw, &want)
		if (gotErr == nil) != (wantErr == nil) || got != want {
			t.Fatalf("%q: unquote = %q, %v; Unmarshal = %q, %v", raw, got, gotErr, want, wantErr)
		}
	})
}
