package message

import (
	"encoding/json"
	"errors"
	"iter"
	"strings"
	"testing"
)

func headerSeq(h map[string]string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for k, v := range h {
			if !yield(k, v) {
				return
			}
		}
	}
}

// Issue 22.2: structured and binary CloudEvents are events, keyed by source + id, typed
// by their type, and journaled as the structured event; one lacking a required attribute
// is quarantined with a reason that names it.
func TestCloudEvents(t *testing.T) {
	orders := CloudEventID("/orders", "evt-456")
	tests := []struct {
		name        string
		body        string
		headers     map[string]string
		source      string // id source setting
		wantID      string
		wantType    string
		wantAgg     string // "" means the id
		wantPayload string // "" means the body as sent
		wantReason  Reason
		wantDetail  string
	}{
		{name: "structured, the issue's example", body: `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"order.placed","data":{"total":12}}`,
			wantID: orders, wantType: "order.placed"},
		{name: "structured, content-type says so", body: `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"order.placed"}`,
			headers: map[string]string{"content-type": "application/cloudevents+json; charset=utf-8"}, wantID: orders, wantType: "order.placed"},
		{name: "structured, subject is the aggregate", body: `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"order.placed","subject":"order-9"}`,
			wantID: orders, wantType: "order.placed", wantAgg: "order-9"},
		{name: "structured, the type wins over an event-type header", body: `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"order.placed"}`,
			headers: map[string]string{HeaderEventType: "other", HeaderAggregateID: "agg-1"}, wantID: orders, wantType: "order.placed", wantAgg: "agg-1"},
		{name: "same id, another source", body: `{"specversion":"1.0","id":"evt-456","source":"/billing","type":"invoice.sent"}`,
			wantID: CloudEventID("/billing", "evt-456"), wantType: "invoice.sent"},
		{name: "a UUID id is keyed with its source too", body: `{"specversion":"1.0","id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01","source":"/orders","type":"t"}`,
			wantID: CloudEventID("/orders", "6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"), wantType: "t"},
		{name: "binary, cloudEvents_ (JMS)", body: `{"total": 12}`,
			headers: map[string]string{"cloudEvents_specversion": "1.0", "cloudEvents_id": "evt-456", "cloudEvents_source": "/orders",
				"cloudEvents_type": "order.placed", "cloudEvents_subject": "order-9", "content-type": "application/json"},
			wantID: orders, wantType: "order.placed", wantAgg: "order-9",
			wantPayload: `{"data":{"total":12},"datacontenttype":"application/json","id":"evt-456","source":"/orders","specversion":"1.0","subject":"order-9","type":"order.placed"}`},
		{name: "binary, cloudEvents: (AMQP)", body: `{"total":12}`,
			headers: map[string]string{"cloudEvents:specversion": "1.0", "cloudEvents:id": "evt-456", "cloudEvents:source": "/orders", "cloudEvents:type": "order.placed"},
			wantID:  orders, wantType: "order.placed",
			wantPayload: `{"data":{"total":12},"id":"evt-456","source":"/orders","specversion":"1.0","type":"order.placed"}`},
		{name: "binary, ce- with an extension and text data", body: `hello`,
			headers: map[string]string{"ce-specversion": "1.0", "ce-id": "e1", "ce-source": "s", "ce-type": "t", "ce-traceparent": "00-abc", "content-type": "text/plain"},
			wantID:  CloudEventID("s", "e1"), wantType: "t",
			wantPayload: `{"data":"hello","datacontenttype":"text/plain","id":"e1","source":"s","specversion":"1.0","traceparent":"00-abc","type":"t"}`},
		{name: "binary, ce_ with bytes", body: "\x00\xff",
			headers: map[string]string{"ce_specversion": "1.0", "ce_id": "e1", "ce_source": "s", "ce_type": "t", "content-type": "application/octet-stream"},
			wantID:  CloudEventID("s", "e1"), wantType: "t",
			wantPayload: `{"data_base64":"AP8=","datacontenttype":"application/octet-stream","id":"e1","source":"s","specversion":"1.0","type":"t"}`},
		{name: "binary, JSON content-type but no JSON", body: `nope`,
			headers: map[string]string{"ce_specversion": "1.0", "ce_id": "e1", "ce_source": "s", "ce_type": "t", "content-type": "application/json"}, wantReason: ReasonNotJSON},
		{name: "structured, no id", body: `{"specversion":"1.0","source":"/orders","type":"t"}`, wantReason: ReasonMissingID, wantDetail: `"id"`},
		{name: "structured, no source", body: `{"specversion":"1.0","id":"e","type":"t"}`, wantReason: ReasonMissingSource, wantDetail: `"source"`},
		{name: "structured, no type", body: `{"specversion":"1.0","id":"e","source":"s"}`, wantReason: ReasonMissingType, wantDetail: `"type"`},
		{name: "structured by content-type, no specversion", body: `{"id":"e","source":"s","type":"t"}`,
			headers: map[string]string{"content-type": "application/cloudevents+json"}, wantReason: ReasonMissingSpecVersion, wantDetail: `"specversion"`},
		{name: "binary, no source", body: `{}`, headers: map[string]string{"cloudEvents_specversion": "1.0", "cloudEvents_id": "e", "cloudEvents_type": "t"},
			wantReason: ReasonMissingSource, wantDetail: `"source"`},
		{name: "binary, no id", body: `{}`, headers: map[string]string{"ce-specversion": "1.0", "ce-source": "s", "ce-type": "t"},
			wantReason: ReasonMissingID, wantDetail: `"id"`},
		{name: "binary, no type", body: `{}`, headers: map[string]string{"ce_specversion": "1.0", "ce_source": "s", "ce_id": "e"},
			wantReason: ReasonMissingType, wantDetail: `"type"`},
		{name: "specversion 0.3", body: `{"specversion":"0.3","id":"e","source":"s","type":"t"}`, wantReason: ReasonInvalidAttribute, wantDetail: "specversion"},
		{name: "numeric id", body: `{"specversion":"1.0","id":5,"source":"s","type":"t"}`, wantReason: ReasonInvalidID},
		{name: "empty source", body: `{"specversion":"1.0","id":"e","source":"","type":"t"}`, wantReason: ReasonInvalidAttribute, wantDetail: "source"},
		{name: "id-source cloudevents refuses a plain event", source: "cloudevents", body: `{"id":"evt-456","type":"t"}`, wantReason: ReasonMissingSpecVersion},
		{name: "id-source cloudevents takes a CloudEvent", source: "cloudevents", body: `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"t"}`,
			wantID: orders, wantType: "t"},
		{name: "id-source header does not apply to a CloudEvent", source: "header:message-id", body: `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"t"}`,
			headers: map[string]string{"message-id": "ID:1"}, wantID: orders, wantType: "t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := ParseIDSource(tt.source)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := Decode([]byte(tt.body), func(k string) string { return tt.headers[k] },
				Options{IDSource: src, Headers: headerSeq(tt.headers), DefaultEventType: "default"})
			if tt.wantReason != "" {
				var inv *Invalid
				if !errors.As(err, &inv) || inv.Reason != tt.wantReason || !strings.Contains(inv.Detail, tt.wantDetail) {
					t.Fatalf("err = %v, want reason %s naming %s", err, tt.wantReason, tt.wantDetail)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			wantAgg := tt.wantAgg
			if wantAgg == "" {
				wantAgg = tt.wantID
			}
			if ev.ID != tt.wantID || ev.EventType != tt.wantType || ev.AggregateID != wantAgg {
				t.Errorf("id %s type %s aggregate %s; want %s, %s, %s", ev.ID, ev.EventType, ev.AggregateID, tt.wantID, tt.wantType, wantAgg)
			}
			wantPayload := tt.wantPayload
			if wantPayload == "" {
				wantPayload = tt.body
			}
			if string(ev.Payload) != wantPayload {
				t.Errorf("payload %s\nwant    %s", ev.Payload, wantPayload)
			}
		})
	}
}

// The extension attributes of a binary event reach its structured form only when every
// header can be enumerated; the spec's own attributes always do.
func TestBinaryWithoutEnumeration(t *testing.T) {
	h := map[string]string{"ce-specversion": "1.0", "ce-id": "e1", "ce-source": "s", "ce-type": "t", "ce-time": "2026-01-01T00:00:00Z", "ce-x": "y"}
	ev, err := Decode([]byte(`{}`), func(k string) string { return h[k] }, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"data":{},"id":"e1","source":"s","specversion":"1.0","time":"2026-01-01T00:00:00Z","type":"t"}`; string(ev.Payload) != want {
		t.Fatalf("payload %s, want %s", ev.Payload, want)
	}
}

// FuzzCloudEventHeaders: any binary-mode headers and body either decode or are refused
// with a reason; an accepted one is valid JSON whose structured decoding, with no
// headers at all, is the same event (binary and structured modes agree).
func FuzzCloudEventHeaders(f *testing.F) {
	f.Add(uint8(0), "1.0", "evt-456", "/orders", "order.placed", "subject", "order-9", "application/json", []byte(`{"total":12}`))
	f.Add(uint8(1), "1.0", "e", "s", "t", "traceparent", "00-1", "text/plain", []byte("hi"))
	f.Add(uint8(2), "1.0", "", "s", "t", "x", "", "", []byte{0, 0xff})
	f.Add(uint8(3), "0.3", "e", "", "t", "Bad-Name", "v", "application/cloudevents+json", []byte(`{"specversion":"1.0"}`))
	f.Fuzz(func(t *testing.T, p uint8, spec, id, source, typ, extName, extVal, ct string, body []byte) {
		prefix := ceHeaderPrefixes[int(p)%len(ceHeaderPrefixes)]
		h := map[string]string{}
		for k, v := range map[string]string{"specversion": spec, "id": id, "source": source, "type": typ, extName: extVal} {
			if v != "" {
				h[prefix+k] = v
			}
		}
		if ct != "" {
			h["content-type"] = ct
		}
		ev, err := Decode(body, func(k string) string { return h[k] }, Options{Headers: headerSeq(h), MaxBodyBytes: 1 << 16})
		if err != nil {
			if inv, ok := errors.AsType[*Invalid](err); !ok || inv.Reason == "" {
				t.Fatalf("error without reason: %v", err)
			}
			return
		}
		if c, ok := CanonicalUUID(ev.ID); !ok || c != ev.ID {
			t.Fatalf("journal id %q is not a canonical UUID", ev.ID)
		}
		if !json.Valid(ev.Payload) {
			t.Fatalf("payload is not JSON: %q", ev.Payload)
		}
		again, err := Decode(ev.Payload, func(string) string { return "" }, Options{MaxBodyBytes: 1 << 16})
		if err != nil || again.ID != ev.ID || again.EventType != ev.EventType {
			t.Fatalf("structured form %s decodes to %+v, %v; binary gave %s %s", ev.Payload, again, err, ev.ID, ev.EventType)
		}
	})
}

// BenchmarkDecodeIDs: what a non-UUID id (one SHA-1) and CloudEvents cost at decode,
// beside a UUID id.
func BenchmarkDecodeIDs(b *testing.B) {
	binary := map[string]string{"cloudEvents_specversion": "1.0", "cloudEvents_id": "evt-456", "cloudEvents_source": "/orders",
		"cloudEvents_type": "order.placed", "content-type": "application/json"}
	for _, c := range []struct {
		name    string
		body    string
		headers map[string]string
	}{
		{"uuid", `{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01","type":"order.placed","data":{"orderId":"o-1","total":12}}`, nil},
		{"string", `{"id":"evt-456","type":"order.placed","data":{"orderId":"o-1","total":12}}`, nil},
		{"cloudevent-structured", `{"specversion":"1.0","id":"evt-456","source":"/orders","type":"order.placed","data":{"orderId":"o-1","total":12}}`, nil},
		{"cloudevent-binary", `{"orderId":"o-1","total":12}`, binary},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := Options{Headers: headerSeq(c.headers)}
			header := func(k string) string { return c.headers[k] }
			body := []byte(c.body)
			for b.Loop() {
				if _, err := Decode(body, header, opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
