package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/inboxd/inboxd/internal/message"
)

// CloudEvent is an outgoing CloudEvents 1.0 event
// (https://github.com/cloudevents/spec/blob/v1.0.2/cloudevents/spec.md), for
// CloudEventMessage. ID, Source and Type are REQUIRED; the rest is optional.
type CloudEvent struct {
	ID      string
	Source  string
	Type    string
	Subject string
	Time    time.Time // zero: no time attribute
	// DataContentType is the media type of Data; empty means application/json.
	DataContentType string
	// Data is the event data, as JSON (nil: no data).
	Data json.RawMessage
	// Extensions are extension attributes: lower-case letters and digits, string values.
	Extensions map[string]string
}

// CEMode is how CloudEventMessage puts an event on the wire (AMQP binding §3).
type CEMode int

const (
	// CEStructured: the body is the JSON-format event, content-type
	// application/cloudevents+json (AMQP binding §3.2).
	CEStructured CEMode = iota
	// CEBinary: attributes in cloudEvents_-prefixed headers, the JMS-compatible prefix
	// the binding prefers (§3.1.3.1); content-type is datacontenttype, the body is the data.
	CEBinary
)

// CloudEventMessage is the Outgoing that carries e to destination in mode; pass it to
// Emit or EmitBatch like any other. Its outbox id is derived from e's source and id
// (message.CloudEventID, also the journal id an inboxd consumer gives it), so that a
// handler that runs again emits nothing new.
func CloudEventMessage(destination string, e CloudEvent, mode CEMode) (Outgoing, error) {
	if e.ID == "" || e.Source == "" || e.Type == "" {
		return Outgoing{}, fmt.Errorf("%w: a CloudEvent needs id, source and type", ErrInvalid)
	}
	if e.Data != nil && !json.Valid(e.Data) {
		return Outgoing{}, fmt.Errorf("%w: CloudEvent data is not JSON", ErrInvalid)
	}
	attrs := map[string]string{"specversion": "1.0", "id": e.ID, "source": e.Source, "type": e.Type}
	if e.Subject != "" {
		attrs["subject"] = e.Subject
	}
	if !e.Time.IsZero() {
		attrs["time"] = e.Time.UTC().Format(time.RFC3339Nano)
	}
	for _, k := range slices.Sorted(maps.Keys(e.Extensions)) {
		if _, core := attrs[k]; core || !message.IsAttributeName(k) || k == "datacontenttype" || k == "data" {
			return Outgoing{}, fmt.Errorf("%w: CloudEvent extension %q: want lower-case letters and digits, not a core attribute", ErrInvalid, message.Truncate(k, 40))
		}
		attrs[k] = e.Extensions[k]
	}
	ct := e.DataContentType
	if ct == "" && e.Data != nil {
		ct = "application/json"
	}
	o := Outgoing{Destination: destination, ID: message.CloudEventID(e.Source, e.ID), Headers: map[string]string{}}
	switch mode {
	case CEStructured:
		doc := map[string]any{}
		for k, v := range attrs {
			doc[k] = v
		}
		if ct != "" {
			doc["datacontenttype"] = ct
		}
		if e.Data != nil {
			doc["data"] = e.Data
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(doc); err != nil {
			return Outgoing{}, fmt.Errorf("%w: encoding CloudEvent: %w", ErrInvalid, err)
		}
		o.Body = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		o.Headers["content-type"] = message.CEStructuredType
	case CEBinary:
		for k, v := range attrs {
			o.Headers["cloudEvents_"+k] = v
		}
		if ct != "" {
			o.Headers["content-type"] = ct
		}
		o.Body = e.Data
	default:
		return Outgoing{}, fmt.Errorf("%w: unknown CloudEvents mode %d", ErrInvalid, mode)
	}
	if _, err := o.Validate(); err != nil {
		return Outgoing{}, err
	}
	return o, nil
}
