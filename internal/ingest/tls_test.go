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
