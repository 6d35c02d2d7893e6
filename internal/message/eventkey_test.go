package message

import "testing"

// TestEventKey: the event's own id, read back from its journal payload, for
// Event.Key: from the field the id source names, a CloudEvent's id whatever it names,
// and nothing from a header, which the journal does not keep.
func TestEventKey(t *testing.T) {
	ce := `{"specversion":"1.0","id":"e-1","source":"s","type":"t"}`
	for _, tt := range []struct {
		payload, src, want string
	}{
		{`{"id":"ord-0001"}`, "", "ord-0001"},
		{`{"id":"ord-0001"}`, "payload:id", "ord-0001"},
		{`{"orderId":"ord-7","id":"x"}`, "payload:orderId", "ord-7"},
		{ce, "", "e-1"},
		{ce, "payload:orderId", "e-1"},
		{ce, "cloudevents", "e-1"},
		{`{"id":"ord-0001"}`, "header:message-id", ""},
		{`{"id":12}`, "", ""},
		{`not json`, "", ""},
	} {
		src, err := ParseIDSource(tt.src)
		if err != nil {
			t.Fatal(err)
		}
		if got := EventKey([]byte(tt.payload), src); got != tt.want {
			t.Errorf("EventKey(%s, %q) = %q, want %q", tt.payload, tt.src, got, tt.want)
		}
	}
}

func BenchmarkEventKey(b *testing.B) {
	payload := []byte(`{"id":"ord-0001","type":"order.placed","customer":"ada","total":42,"lines":[{"sku":"a","n":1},{"sku":"b","n":2}]}`)
	for range b.N {
		EventKey(payload, IDSource{})
	}
}
