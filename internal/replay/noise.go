package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrPath is wrapped by ParsePath's errors.
var ErrPath = errors.New("invalid ignore path")

// Path is a noise rule: a part of an emitted message a comparison ignores. Its text is
// "headers.NAME" (a header, e.g. headers.x-time) or "body.$" followed by JSON steps:
// .name, ["name"], [index] or [*] / .* (every member), e.g. body.$.createdAt or
// body.$.items[*].at. A body that is not JSON is compared as is.
type Path struct {
	text   string
	header string // set for a header rule
	steps  []step // a body rule's steps after $
}

type step struct {
	key   string
	index int // -1: key (or any) applies
	any   bool
}

// String returns the rule as it was written.
func (p Path) String() string { return p.text }

// maxPathLen bounds a rule: it comes from a command line or a config.
const maxPathLen = 1024

// ParsePath reads one noise rule.
func ParsePath(s string) (Path, error) {
	p := Path{text: s}
	if len(s) > maxPathLen {
		return Path{}, fmt.Errorf("%w: longer than %d bytes", ErrPath, maxPathLen)
	}
	if h, ok := strings.CutPrefix(s, "headers."); ok {
		if h == "" || strings.ContainsAny(h, " \t\r\n:") {
			return Path{}, fmt.Errorf("%w %q: want a header name after \"headers.\"", ErrPath, s)
		}
		p.header = strings.ToLower(h)
		return p, nil
	}
	rest, ok := strings.CutPrefix(s, "body.$")
	if !ok {
		return Path{}, fmt.Errorf("%w %q: it starts with headers. or body.$", ErrPath, s)
	}
	for rest != "" {
		switch {
		case rest[0] == '.':
			rest = rest[1:]
			n := strings.IndexAny(rest, ".[")
			if n < 0 {
				n = len(rest)
			}
			name := rest[:n]
			if name == "" {
				return Path{}, fmt.Errorf("%w %q: an empty name", ErrPath, s)
			}
			if name == "*" {
				p.steps = append(p.steps, step{index: -1, any: true})
			} else {
				p.steps = append(p.steps, step{key: name, index: -1})
			}
			rest = rest[n:]
		case rest[0] == '[':
			end := strings.IndexByte(rest, ']')
			if strings.HasPrefix(rest, `["`) {
				// A quoted name ends at the first `"]` not escaped; names with `"]` are not
				// expressible, which noise rules do not need.
				end = strings.Index(rest, `"]`)
				if end < 0 {
					return Path{}, fmt.Errorf("%w %q: an unterminated [\"name\"]", ErrPath, s)
				}
				name, err := strconv.Unquote(rest[1 : end+1])
				if err != nil {
					return Path{}, fmt.Errorf("%w %q: %v", ErrPath, s, err)
				}
				p.steps = append(p.steps, step{key: name, index: -1})
				rest = rest[end+2:]
				continue
			}
			if end < 0 {
				return Path{}, fmt.Errorf("%w %q: an unterminated [", ErrPath, s)
			}
			in := rest[1:end]
			if in == "*" {
				p.steps = append(p.steps, step{index: -1, any: true})
			} else {
				i, err := strconv.Atoi(in)
				if err != nil || i < 0 || in != strconv.Itoa(i) {
					return Path{}, fmt.Errorf("%w %q: [%s] is not an index, \"name\" or *", ErrPath, s, in)
				}
				p.steps = append(p.steps, step{index: i})
			}
			rest = rest[end+1:]
		default:
			return Path{}, fmt.Errorf("%w %q: expected . or [ at %q", ErrPath, s, rest)
		}
	}
	if len(p.steps) == 0 {
		return Path{}, fmt.Errorf("%w %q: body.$ alone would ignore the whole body", ErrPath, s)
	}
	return p, nil
}

// ParsePaths reads several rules.
func ParsePaths(ss []string) ([]Path, error) {
	out := make([]Path, 0, len(ss))
	for _, s := range ss {
		p, err := ParsePath(s)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// inboxdHeaders are headers inboxd sets on an emitted message, not the handler:
// the trace context of the processing that emitted it differs on every run.
var inboxdHeaders = map[string]bool{"traceparent": true, "tracestate": true}

// normalHeaders is h without the ignored headers and inboxd's own.
func normalHeaders(h map[string]string, rules []Path) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		lk := strings.ToLower(k)
		if inboxdHeaders[lk] {
			continue
		}
		skip := false
		for _, r := range rules {
			if r.header != "" && r.header == lk {
				skip = true
				break
			}
		}
		if !skip {
			out[k] = v
		}
	}
	return out
}

// normalBody is b without the ignored JSON fields, re-encoded with sorted keys, so
// that two bodies compare equal exactly when they differ only in ignored fields and
// layout. A body that is not JSON is returned as is.
func normalBody(b []byte, rules []Path) string {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil || d.More() {
		return string(b)
	}
	for _, r := range rules {
		if r.header == "" {
			v = drop(v, r.steps)
		}
	}
	out, err := json.Marshal(v)
	if err != nil {
		return string(b)
	}
	return string(out)
}

// drop removes what steps select from v (an array element becomes null, so that the
// others keep their places) and returns v.
func drop(v any, steps []step) any {
	if len(steps) == 0 {
		return v
	}
	s, last := steps[0], len(steps) == 1
	switch x := v.(type) {
	case map[string]any:
		for k, child := range x {
			if !s.any && (s.index >= 0 || k != s.key) {
				continue
			}
			if last {
				delete(x, k)
			} else {
				x[k] = drop(child, steps[1:])
			}
		}
	case []any:
		for i, child := range x {
			if !s.any && s.index != i {
				continue
			}
			if last {
				x[i] = nil
			} else {
				x[i] = drop(child, steps[1:])
			}
		}
	}
	return v
}
