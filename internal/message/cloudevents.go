package message

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"iter"
	"mime"
	"strings"
	"unicode/utf8"
)

// CloudEvents 1.0 (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/spec.md)
// over STOMP, after the AMQP protocol binding, the one closest to JMS
// (https://github.com/cloudevents/spec/blob/main/cloudevents/bindings/amqp-protocol-binding.md):
//
//   - structured mode: the body is a JSON-format CloudEvent: the content-type is
//     application/cloudevents+json (binding §3.2.1), or the JSON object has "specversion";
//   - binary mode: the attributes are headers prefixed "cloudEvents_" (JMS-compatible,
//     which the binding says SHOULD be preferred), "cloudEvents:" (§3.1.3.1), or "ce-" /
//     "ce_" (the HTTP and Kafka bindings' prefixes, which producers bridged from those
//     send); the content-type header is datacontenttype (§3.1.1) and the body is the data.
//
// Both are journaled as the structured (JSON format) event: a binary one is rebuilt as
// one, deterministically, so that its redeliveries carry the same payload. Its journal
// key is source + id, as the spec requires ("Producers MUST ensure that source + id is
// unique for each distinct event"; spec §3.1.1 id): the same id from two sources is two
// events. The event type is the CloudEvent's type; the aggregate is its subject when it
// has one (the thing the event is about, within the source: what must be processed in
// order), else the aggregate-id header, else the event itself.

// Reasons that name the CloudEvents attribute a message lacks; missing_id and
// missing_type serve CloudEvents too, naming "id" and "type".
const (
	ReasonMissingSource      Reason = "missing_source"
	ReasonMissingSpecVersion Reason = "missing_specversion"
	// ReasonInvalidAttribute: a CloudEvents attribute of the wrong type or value (the
	// detail names it), or a specversion other than 1.0.
	ReasonInvalidAttribute Reason = "invalid_attribute"
)

// ceHeaderPrefixes are the binary-mode attribute prefixes, the AMQP binding's first.
var ceHeaderPrefixes = []string{"cloudEvents_", "cloudEvents:", "ce-", "ce_"}

// CEStructuredType is the media type of a structured-mode CloudEvent in the JSON format
// (AMQP binding §3.2.1), the content-type an emitted CloudEvent carries.
const CEStructuredType = "application/cloudevents+json"

// maxCEAttributes bounds the attributes a binary-mode event may carry; STOMP frames
// are bounded by the broker, this keeps the rebuilt event small too.
const maxCEAttributes = 64

// IsCloudEventHeader reports whether a header carries a binary-mode CloudEvent
// attribute (any of the prefixes), so that a re-published message keeps its attributes.
func IsCloudEventHeader(name string) bool {
	for _, p := range ceHeaderPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// binaryPrefix returns the prefix of a binary-mode CloudEvent's headers, or "" when the
// message is not one: it has a specversion header under one of the prefixes, and its
// content-type is not a structured event format.
func binaryPrefix(header func(string) string) string {
	if isStructuredType(header("content-type")) {
		return ""
	}
	for _, p := range ceHeaderPrefixes {
		if header(p+"specversion") != "" {
			return p
		}
	}
	return ""
}

func isStructuredType(ct string) bool {
	// Any CloudEvents event format (application/cloudevents+json, +avro, …): only JSON is
	// understood, and a structured body that is not JSON is quarantined as not_json.
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), strings.TrimSuffix(CEStructuredType, "+json"))
}

// isJSONType reports whether a datacontenttype says the data is JSON (JSON format §3.1:
// application/json, and any media type with the +json suffix).
func isJSONType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}

// IsAttributeName reports whether n is a CloudEvents attribute name: lower-case ASCII letters and
// digits (spec §3.1.1 "Attribute Naming Convention").
func IsAttributeName(n string) bool {
	if n == "" || len(n) > maxHeaderValue {
		return false
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// BinaryToStructured rebuilds a binary-mode CloudEvent (attributes in headers with
// prefix, data in body) as its JSON-format structured event. all enumerates every header
// (for extension attributes); nil reads only the attributes the spec defines. The
// result is deterministic (keys sorted), so redeliveries rebuild the same bytes. A
// missing required attribute is left out, for the structured check to name it.
func BinaryToStructured(prefix string, body []byte, header func(string) string, all iter.Seq2[string, string]) ([]byte, error) {
	attrs := map[string]any{}
	set := func(name, v string) error {
		// An id or a source may be up to maxKeyBytes; the structured check bounds the rest.
		if len(v) > maxKeyBytes || !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return &Invalid{ReasonInvalidHeader, fmt.Sprintf("header %s%s must be valid UTF-8 without NUL and at most %d bytes",
				prefix, name, maxKeyBytes)}
		}
		if len(attrs) >= maxCEAttributes {
			return &Invalid{ReasonInvalidHeader, fmt.Sprintf("more than %d CloudEvents attribute headers", maxCEAttributes)}
		}
		attrs[name] = v
		return nil
	}
	if all != nil {
		for k, v := range all {
			name, ok := strings.CutPrefix(k, prefix)
			if !ok || name == "datacontenttype" || name == "data" || name == "data_base64" || !IsAttributeName(name) {
				continue // the content-type header is datacontenttype (binding §3.1.1)
			}
			if _, dup := attrs[name]; dup {
				continue // STOMP: the first occurrence of a repeated header wins
			}
			if err := set(name, v); err != nil {
				return nil, err
			}
		}
	} else {
		for _, name := range []string{"specversion", "id", "source", "type", "subject", "time", "dataschema"} {
			if v := header(prefix + name); v != "" {
				if err := set(name, v); err != nil {
					return nil, err
				}
			}
		}
	}
	ct := header("content-type")
	if ct != "" {
		if !storable(ct) {
			return nil, &Invalid{ReasonInvalidHeader, fmt.Sprintf("header content-type must be valid UTF-8 without NUL and at most %d bytes", maxHeaderValue)}
		}
		attrs["datacontenttype"] = ct
	}
	if len(body) > 0 {
		// JSON data stays JSON (JSON format §3.1); text stays text; anything else, or text
		// JSONB could not store, goes as data_base64.
		switch {
		case (ct == "" || isJSONType(ct)) && json.Valid(body):
			attrs["data"] = json.RawMessage(body)
		case isJSONType(ct):
			return nil, &Invalid{ReasonNotJSON, fmt.Sprintf("content-type %s, but the body is not JSON", Truncate(ct, 64))}
		case utf8.Valid(body) && !bytes.ContainsRune(body, 0):
			attrs["data"] = string(body)
		default:
			attrs["data_base64"] = base64.StdEncoding.EncodeToString(body)
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(attrs); err != nil {
		return nil, &Invalid{ReasonNotJSON, "rebuilding the structured event: " + err.Error()}
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// isCloudEvent reports whether a JSON object is a structured-mode CloudEvent.
func isCloudEvent(fields map[string]json.RawMessage, header func(string) string) bool {
	_, ok := fields["specversion"]
	return ok || isStructuredType(header("content-type"))
}

// cloudEvent checks a structured CloudEvent's required attributes (spec §3.1) and
// returns its journal id (from source + id), its type and its subject.
func cloudEvent(fields map[string]json.RawMessage) (id, typ, subject string, err error) {
	attr := func(name string, missing Reason) (string, error) {
		raw, ok := fields[name]
		if !ok || string(raw) == "null" {
			return "", &Invalid{missing, fmt.Sprintf("CloudEvent has no %q attribute (REQUIRED)", name)}
		}
		s, err := unquote(raw)
		if err != nil || s == "" {
			reason := ReasonInvalidAttribute
			if name == "id" {
				reason = ReasonInvalidID
			}
			return "", &Invalid{reason, fmt.Sprintf("CloudEvent attribute %q must be a non-empty string, got %s", name, Truncate(string(raw), 64))}
		}
		return s, nil
	}
	spec, err := attr("specversion", ReasonMissingSpecVersion)
	if err != nil {
		return "", "", "", err
	}
	if spec != "1.0" {
		return "", "", "", &Invalid{ReasonInvalidAttribute, fmt.Sprintf("CloudEvent specversion %q: only 1.0 is understood", Truncate(spec, 16))}
	}
	ceID, err := attr("id", ReasonMissingID)
	if err != nil {
		return "", "", "", err
	}
	source, err := attr("source", ReasonMissingSource)
	if err != nil {
		return "", "", "", err
	}
	if typ, err = attr("type", ReasonMissingType); err != nil {
		return "", "", "", err
	}
	if err := checkKey(ceID, `CloudEvent "id"`); err != nil {
		return "", "", "", err
	}
	if err := checkKey(source, `CloudEvent "source"`); err != nil {
		return "", "", "", &Invalid{ReasonInvalidAttribute, err.(*Invalid).Detail}
	}
	if raw, ok := fields["subject"]; ok && string(raw) != "null" {
		var err error
		if subject, err = unquote(raw); err != nil {
			return "", "", "", &Invalid{ReasonInvalidAttribute, fmt.Sprintf("CloudEvent attribute \"subject\" must be a string, got %s", Truncate(string(raw), 64))}
		}
	}
	return CloudEventID(source, ceID), typ, subject, nil
}

// CloudEventID is the journal id of the CloudEvent with this source and id: the UUIDv5
// of both, length-prefixed so that no two (source, id) pairs share a name. A UUID id is
// not kept as is: two sources may send the same one.
func CloudEventID(source, id string) string {
	return UUIDv5(keyNamespace, fmt.Sprintf("cloudevents:%d:%s%s", len(source), source, id))
}
