package testenv

import (
	"encoding/xml"
	"os"
	"strings"
	"testing"
)

func TestPrivateConf(t *testing.T) {
	conf, err := os.ReadFile("../../scripts/activemq.xml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name              string
		tlsAddr, mutual   string
		want, wantMissing []string
	}{
		{name: "plaintext only", want: []string{"stomp://127.0.0.1:1000?"},
			wantMissing: []string{"sslContext", "stomp+ssl", "61613", "61612", "61611", "BEGIN tls", "END tls"}},
		{name: "own TLS ports", tlsAddr: "127.0.0.1:1001", mutual: "127.0.0.1:1002",
			want:        []string{"stomp://127.0.0.1:1000?", "stomp+ssl://127.0.0.1:1001?", "stomp+ssl://127.0.0.1:1002?transport.needClientAuth=true", "<sslContext"},
			wantMissing: []string{"61613", "61612", "61611"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := privateConf(conf, "127.0.0.1:1000", tt.tlsAddr, tt.mutual)
			if err != nil {
				t.Fatal(err)
			}
			if err := xml.Unmarshal(out, new(struct{})); err != nil {
				t.Fatalf("rewritten configuration is not XML: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("missing %q", w)
				}
			}
			for _, w := range tt.wantMissing {
				if strings.Contains(string(out), w) {
					t.Errorf("still has %q", w)
				}
			}
		})
	}
}
