package webhook_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/webhook"
)

// A client's spare connection (handshake done, no request sent) does not hold the
// webhook's shutdown: http.Server.Shutdown counts such a connection as busy for its
// first 5 s, and waiting for it spent the whole grace, and with it the process's
// shutdown budget. With no batch in flight, Run returns nil about closeGrace after its
// context ends, whatever the grace.
func TestServerShutdownDoesNotWaitForIdleNewConnections(t *testing.T) {
	bundle, err := certs.Load(certs.Config{Dir: t.TempDir(), Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	h := webhook.New(webhook.Config{AuthHeader: token}, newBlockingProcessor(), nil, nil, nil)
	srv, err := webhook.Listen("127.0.0.1:0", bundle.TLSConfig, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, time.Minute) }()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(bundle.CAPEM)
	conn, err := tls.Dial("tcp", srv.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.Handshake(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	cancel()
	// Before, it took the 5 s the new connection counts as busy (6.3 s here); now
	// closeGrace (1 s). 4 s leaves room for a loaded machine.
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil: no batch was in flight", err)
		}
		if took := time.Since(start); took > 4*time.Second {
			t.Errorf("Run took %s to stop with an idle new connection open, want about 1 s", took.Round(time.Millisecond))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context's end (grace 1 min)")
	}
}
