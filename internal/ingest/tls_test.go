package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/loadgen"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Ingest over the shared broker's stomp+ssl connectors: the publisher verifies the
// broker against the generated CA, the subscriber also presents a client certificate
// (transport.needClientAuth=true). Journal and quarantine end up exact, as in plaintext.
func TestIngestOverTLS(t *testing.T) {
	b := testenv.SharedBrokerTLS(t)
	serverAuth, err := stompx.LoadTLS(stompx.TLSFiles{CAFile: b.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	mutual, err := stompx.LoadTLS(stompx.TLSFiles{CAFile: b.CAFile, CertFile: b.CertFile, KeyFile: b.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exp, err := loadgen.Publish(ctx, loadgen.Config{
		Broker: stompx.Config{Addr: b.Addr, TLS: serverAuth}, Destination: q, Messages: 300,
		DuplicateRatio: 0.2, MalformedRatio: 0.05, Seed: 14, Conns: 2, ReceiptEvery: 50,
	})
	if err != nil {
		t.Fatalf("publishing over TLS: %v", err)
	}
	r := startSubscriber(t, Config{Addr: b.MutualAddr, TLS: mutual, Destinations: []string{q}, AckMode: AckCumulative,
		BatchSize: 64, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
	r.finishExact(t, db.Pool, q, exp)
}

// Ingest over RabbitMQ's stomp+ssl listener (stomp.listeners.ssl, scripts/rabbitmq.conf):
// the broker verified against the node's CA, a client certificate presented (the
// listener verifies one when sent), guest's passcode as the login.
func TestIngestOverTLSRabbitMQ(t *testing.T) {
	r := testenv.Rabbit(t)
	ca, cert, key := r.TLSFiles(t)
	serverAuth, err := stompx.LoadTLS(stompx.TLSFiles{CAFile: ca})
	if err != nil {
		t.Fatal(err)
	}
	mutual, err := stompx.LoadTLS(stompx.TLSFiles{CAFile: ca, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bcfg := brokerCfg(r.TLSAddr)
	bcfg.TLS = serverAuth
	exp, err := loadgen.Publish(ctx, loadgen.Config{
		Broker: bcfg, Destination: q, Messages: 300,
		DuplicateRatio: 0.2, MalformedRatio: 0.05, Seed: 15, Conns: 2, ReceiptEvery: 50,
	})
	if err != nil {
		t.Fatalf("publishing over TLS: %v", err)
	}
	rs := startSubscriber(t, Config{Addr: r.TLSAddr, TLS: mutual, Destinations: []string{q}, AckMode: AckCumulative,
		BatchSize: 64, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
	rs.finishExact(t, db.Pool, q, exp)

	// Plaintext to the TLS listener is refused, never downgraded.
	plain := brokerCfg(r.TLSAddr)
	plain.HeartBeat = -1
	if err := stompx.Reachable(ctx, plain); err == nil {
		t.Error("a plaintext CONNECT to the stomp+ssl listener succeeded")
	}
}
