package webhook_test

import (
	"context"
	"log"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
)

// Issue 28, item 4: the webhook's http.Server had no ErrorLog, so every failed TLS
// handshake wrote a raw line to stderr (the standard logger), one per connection. They
// go to the handler's slog logger now, rate-limited: a burst of failed handshakes is
// one line, and nothing reaches the standard logger.
func TestWebhookServerErrorsGoToSlogRateLimited(t *testing.T) {
	var std testenv.Buffer
	prevOut, prevFlags := log.Writer(), log.Flags()
	log.SetOutput(&std)
	t.Cleanup(func() { log.SetOutput(prevOut); log.SetFlags(prevFlags) })

	bundle, err := certs.Load(certs.Config{Dir: t.TempDir(), Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	h := webhook.New(webhook.Config{AuthHeader: token}, newBlockingProcessor(), nil, nil,
		slog.New(slog.NewTextHandler(&logs, nil)))
	srv, err := webhook.Listen("127.0.0.1:0", bundle.TLSConfig, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })

	const attempts = 30
	for range attempts {
		// Not TLS, and not HTTP either (the server answers those with a 400 and no log
		// line): a handshake error.
		conn, err := net.Dial("tcp", srv.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write([]byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x05})
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = conn.Read(make([]byte, 64)) // until the server closes it
		conn.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), "TLS handshake error") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(logs.String(), "TLS handshake error"); n != 1 {
		t.Errorf("%d failed handshakes gave %d slog lines, want 1 (rate-limited):\n%s", attempts, n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("the server's error line is not a warning:\n%s", logs.String())
	}
	if s := std.String(); s != "" {
		t.Errorf("the webhook server wrote to the standard logger (stderr):\n%s", s)
	}
}
