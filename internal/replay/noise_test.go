package replay

import (
	"errors"
	"testing"
)

func TestParsePath(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		path string
		ok   bool
	}{
		{"body.$.createdAt", true},
		{"body.$.items[*].at", true},
		{"body.$.items[2]", true},
		{`body.$["odd.name"]`, true},
		{"body.$.*.at", true},
		{"headers.x-time", true},
		{"body.$", false},
		{"body.$.", false},
		{"body.$[x]", false},
		{"body.$[-1]", false},
		{"body.$[01]", false},
		{`body.$["open`, false},
		{"headers.", false},
		{"payload.x", false},
		{"body.$x", false},
	} {
		_, err := ParsePath(tt.path)
		if (err == nil) != tt.ok {
			t.Errorf("ParsePath(%q) = %v, want ok %v", tt.path, err, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrPath) {
			t.Errorf("ParsePath(%q) = %v, not ErrPath", tt.path, err)
		}
	}
}

func TestNormalBodyIgnoresPaths(t *testing.T) {
	t.Parallel()
	rules, err := ParsePaths([]string{"body.$.createdAt", "body.$.items[*].at", `body.$["a.b"]`})
	if err != nil {
		t.Fatal(err)
	}
	a := normalBody([]byte(`{"id":1,"createdAt":"t1","items":[{"n":1,"at":"x"}],"a.b":1}`), rules)
	b := normalBody([]byte(`{"items":[{"at":"y","n":1}],"createdAt":"t2","id":1,"a.b":2}`), rules)
	if a != b {
		t.Fatalf("%s != %s", a, b)
	}
	if c := normalBody([]byte(`{"id":2,"createdAt":"t1"}`), rules); c == a {
		t.Fatalf("a changed id compares equal")
	}
	if got := normalBody([]byte("not json"), rules); got != "not json" {
		t.Fatalf("non-JSON body %q", got)
	}
	h := normalHeaders(map[string]string{"X-Time": "1", "k": "v", "traceparent": "00-x"}, mustPaths(t, "headers.x-time"))
	if len(h) != 1 || h["k"] != "v" {
		t.Fatalf("headers %v", h)
	}
}

func mustPaths(t *testing.T, ss ...string) []Path {
	t.Helper()
	p, err := ParsePaths(ss)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Noise rules come from command lines and configs: no input panics, and every rule
// accepted reads back as written and applies to any JSON body without panicking.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"body.$.createdAt", "body.$.items[*].at", `body.$["a"]`, "headers.x", "body.$[0][1]", "body.$.*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePath(s)
		if err != nil {
			return
		}
		if p.String() != s {
			t.Fatalf("String() = %q, want %q", p.String(), s)
		}
		_ = normalBody([]byte(`{"a":[1,{"b":2}],"createdAt":"x","items":[{"at":1}]}`), []Path{p})
	})
}
