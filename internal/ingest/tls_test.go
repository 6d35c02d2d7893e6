package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/loadgen"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Ingest over each broker's stomp+ssl listener: the publisher verifies the broker
// against the generated CA, the subscriber also presents a client certificate. On
// ActiveMQ it connects to the connector that requires one
// (transport.needClientAuth=true); RabbitMQ's listener verifies one when sent
// (scripts/rabbitmq.conf) and logs in as guest. Journal and quarantine end up exact, as
// in plaintext, and a plaintext CONNECT to a TLS listener is refused, never downgraded.
func TestIngestOverTLS(t *testing.T) {
	t.Parallel()
	type listener struct{ pubAddr, subAddr, ca, cert, key string }
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T) listener
	}{
		{"activemq", func(t *testing.T) listener {
			b := testenv.SharedBrokerTLS(t)
			return listener{b.Addr, b.MutualAddr, b.CAFile, b.CertFile, b.KeyFile}
		}},
		{"rabbitmq", func(t *testing.T) listener {
			r := testenv.Rabbit(t)
			ca, cert, key := r.TLSFiles(t)
			return listener{r.TLSAddr, r.TLSAddr, ca, cert, key}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := tc.setup(t)
			serverAuth, err := stompx.LoadTLS(stompx.TLSFiles{CAFile: l.ca})
			if err != nil {
				t.Fatal(err)
			}
			mutual, err := stompx.LoadTLS(stompx.TLSFiles{CAFile: l.ca, CertFile: l.cert, KeyFile: l.key})
			if err != nil {
				t.Fatal(err)
			}
			db := testenv.NewDB(t)
			q := testenv.Queue(t)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			pub := brokerCfg(l.pubAddr)
			pub.TLS = serverAuth
			exp, err := loadgen.Publish(ctx, loadgen.Config{
				Broker: pub, Destination: q, Messages: 300,
				DuplicateRatio: 0.2, MalformedRatio: 0.05, Seed: 14, Conns: 2, ReceiptEvery: 50,
			})
			if err != nil {
				t.Fatalf("publishing over TLS: %v", err)
			}
			r := startSubscriber(t, Config{Addr: l.subAddr, TLS: mutual, Destinations: []string{q}, AckMode: AckCumulative,
				BatchSize: 64, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
			r.finishExact(t, db.Pool, q, exp)

			plain := brokerCfg(l.pubAddr)
			plain.HeartBeat = -1
			if err := stompx.Reachable(ctx, plain); err == nil {
				t.Error("a plaintext CONNECT to the stomp+ssl listener succeeded")
			}
		})
	}
}
