package message

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// errNotObject is topLevelFields' error for valid JSON that is not an object (nor null).
var errNotObject = errors.New("JSON but not an object")

// topLevelFields is json.Unmarshal(body, &map[string]json.RawMessage{}) for the
// decoder's hot path, which needs a handful of top-level members of every message: it
// validates the whole document once (json.Valid) and then slices each member's value
// out of body (values alias body, which the event keeps as its payload), instead of
// decoding it a second time and copying every value. What it returns is the same as
// Unmarshal's (FuzzTopLevelFields checks it against Unmarshal): nil for JSON null, the
// last of repeated keys, and keys unquoted by encoding/json itself whenever they hold
// an escape or invalid UTF-8. Invalid JSON returns Unmarshal's own error, and valid
// JSON that is not an object errNotObject.
func topLevelFields(body []byte) (map[string]json.RawMessage, error) {
	if !json.Valid(body) {
		var fields map[string]json.RawMessage
		err := json.Unmarshal(body, &fields)
		if err == nil { // cannot happen: Unmarshal validates first, as Valid does
			err = errors.New("invalid JSON")
		}
		return nil, err
	}
	i := skipSpace(body, 0)
	switch body[i] {
	case 'n':
		return nil, nil
	case '{':
	default:
		return nil, errNotObject
	}
	fields := make(map[string]json.RawMessage, 8)
	i = skipSpace(body, i+1)
	if body[i] == '}' {
		return fields, nil
	}
	for {
		// A key: a string, then ':'. body is valid JSON, so no bound is checked here.
		kEnd, escaped := stringEnd(body, i)
		var key string
		if escaped || !utf8.Valid(body[i+1:kEnd-1]) { // Unmarshal makes invalid UTF-8 U+FFFD
			if err := json.Unmarshal(body[i:kEnd], &key); err != nil {
				return nil, err
			}
		} else {
			key = string(body[i+1 : kEnd-1])
		}
		i = skipSpace(body, kEnd)
		i = skipSpace(body, i+1) // past ':'
		vEnd := valueEnd(body, i)
		fields[key] = json.RawMessage(body[i:vEnd:vEnd])
		i = skipSpace(body, vEnd)
		if body[i] == '}' {
			return fields, nil
		}
		i = skipSpace(body, i+1) // past ','
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i] (its opening quote)
// and whether it holds an escape.
func stringEnd(b []byte, i int) (int, bool) {
	escaped := false
	for i++; ; i++ {
		switch b[i] {
		case '\\':
			escaped = true
			i++ // the escaped character: never the closing quote
		case '"':
			return i + 1, escaped
		}
	}
}

// valueEnd returns the index just past the valid JSON value starting at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		end, _ := stringEnd(b, i)
		return end
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch b[i] {
			case '"':
				end, _ := stringEnd(b, i)
				i = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
	default: // a number, true, false or null: up to the next delimiter
		for i < len(b) && !isDelimiter(b[i]) {
			i++
		}
		return i
	}
}

func isDelimiter(c byte) bool {
	switch c {
	case ',', '}', ']', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// unquote is json.Unmarshal(raw, &s) for a member topLevelFields returned: a string
// without escapes is sliced out as it is, anything else goes through encoding/json (so
// null gives "" and no error, and a number an error, as there).
func unquote(raw json.RawMessage) (string, error) {
	if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' {
		plain := true
		for _, c := range raw[1 : n-1] {
			if c == '\\' || c == '"' || c < 0x20 || c >= 0x80 {
				plain = false
				break
			}
		}
		if plain {
			return string(raw[1 : n-1]), nil
		}
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}
