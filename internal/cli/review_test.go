package cli

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// fakeListener stands in for a server: it records the first bytes of every connection
// (or what serve returns for it) and closes it.
type fakeListener struct {
	ln   net.Listener
	mu   sync.Mutex
	got  [][]byte
	seen chan struct{} // closed at the first connection recorded
	once sync.Once
}

func listen(t *testing.T, serve func(net.Conn) []byte) *fakeListener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeListener{ln: ln, seen: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				b := serve(c)
				f.mu.Lock()
				f.got = append(f.got, b)
				f.mu.Unlock()
				f.once.Do(func() { close(f.seen) })
			}()
		}
	}()
	return f
}

func (f *fakeListener) addr() string { return f.ln.Addr().String() }

func (f *fakeListener) first(t *testing.T) [][]byte {
	t.Helper()
	select {
	case <-f.seen:
	case <-time.After(30 * time.Second):
		t.Fatal("nothing connected to the fake server")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]byte(nil), f.got...)
}

// firstBytes reads what a client sends first.
func firstBytes(c net.Conn) []byte {
	b := make([]byte, 256)
	n, _ := io.ReadAtLeast(c, b, 5)
	return b[:n]
}

// Issue 28, item 1: "inboxd subscriptions list|remove" built its own broker connection
// without INBOXD_STOMP_TLS: a listener standing in for the broker received CONNECT with
// the login and passcode in clear text, where "inboxd publish" sent a TLS ClientHello.
// Both go through the configured dialer now.
func TestSubscriptionsUseBrokerTLS(t *testing.T) {
	db := testenv.NewDB(t)
	sfx := testenv.Suffix()
	if err := journal.RecordSubscription(context.Background(), db.Pool, "inboxd-tls-"+sfx, "inboxd", "/topic/inboxd-test.tls."+sfx); err != nil {
		t.Fatal(err)
	}
	t.Setenv("INBOXD_STOMP_PASSCODE", "s3cret-passcode")
	for _, tc := range []struct{ cmd, args []string }{
		{[]string{"subscriptions", "list"}, []string{"-json"}},
		{[]string{"subscriptions", "remove"}, []string{"-force", "inboxd-tls-" + sfx, "inboxd"}},
		{[]string{"publish"}, []string{"-n", "1"}}, // the reference: publish always dialed with TLS
	} {
		t.Run(strings.Join(tc.cmd, " "), func(t *testing.T) {
			broker := listen(t, firstBytes)
			args := append(append(tc.cmd, "-database-url", db.URL, "-stomp-addr", broker.addr(), "-stomp-tls", "-stomp-login", "inboxd"), tc.args...)
			run(t, args...)
			for _, b := range broker.first(t) {
				if bytes.Contains(b, []byte("s3cret-passcode")) || bytes.Contains(b, []byte("CONNECT")) || bytes.Contains(b, []byte("STOMP")) {
					t.Errorf("the broker received a plaintext frame: %q", b)
				}
				if len(b) == 0 || b[0] != 0x16 { // a TLS handshake record: the ClientHello
					t.Errorf("the broker received %q, want a TLS ClientHello", b)
				}
			}
		})
	}
}

// fakePostgres asks the client for a clear-text password and returns it.
func fakePostgres(c net.Conn) []byte {
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return nil
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		code := binary.BigEndian.Uint32(hdr[4:])
		if n < 8 || n > 10000 {
			return nil
		}
		if _, err := io.CopyN(io.Discard, c, int64(n-8)); err != nil {
			return nil
		}
		if code == 80877103 || code == 80877104 { // SSLRequest, GSSENCRequest: no
			if _, err := c.Write([]byte{'N'}); err != nil {
				return nil
			}
			continue
		}
		break
	}
	// AuthenticationCleartextPassword
	if _, err := c.Write([]byte{'R', 0, 0, 0, 8, 0, 0, 0, 3}); err != nil {
		return nil
	}
	var hdr [5]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[0] != 'p' {
		return nil
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 || n > 10000 {
		return nil
	}
	pw := make([]byte, n-4)
	if _, err := io.ReadFull(c, pw); err != nil {
		return nil
	}
	return append([]byte("password:"), bytes.TrimRight(pw, "\x00")...)
}

// Issue 28, item 1: "inboxd subscriptions" opened its pool from the URL alone,
// ignoring INBOXD_DATABASE_PASSWORD_FILE. A fake database asks for a clear-text
// password and records the one it gets.
func TestSubscriptionsUseDatabasePasswordFile(t *testing.T) {
	brokerAddr := testenv.Broker(t) // remove asks the broker first; it knows no such subscription
	sfx := testenv.Suffix()
	for _, tc := range []struct{ action, args []string }{
		{[]string{"list"}, nil},
		{[]string{"remove"}, []string{"-force", "inboxd-pw-" + sfx, "inboxd"}},
	} {
		t.Run(tc.action[0], func(t *testing.T) {
			pg := listen(t, fakePostgres)
			url := "postgres://inboxd@" + pg.addr() + "/inboxd?sslmode=disable&connect_timeout=5"
			args := append([]string{"subscriptions", tc.action[0], "-database-url", url,
				"-database-password-file", writeSecret(t, "pg-s3cret\n", 0o600), "-stomp-addr", brokerAddr}, tc.args...)
			code, _, errOut := run(t, args...)
			for _, b := range pg.first(t) {
				if b != nil && string(b) != "password:pg-s3cret" { // nil: a connection that sent no password
					t.Errorf("the database received %q, want the password from the file (exit %d, %s)", b, code, strings.TrimSpace(errOut))
				}
			}
		})
	}
}

// Issue 28, item 1: one command built its own broker config and pool. Every command
// reaches the broker through cfg.Stomp (stompx.DialConn with the TLS settings) and the
// database through openPool or cfg.ConnConfig (the password file): no other.
func TestCommandsUseTheConfiguredConnections(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, own := range []string{"stompx.Config{", "pgxpool.New(", "pgx.Connect(", "stomp.Dial"} {
			if bytes.Contains(src, []byte(own)) {
				t.Errorf("%s builds its own connection (%s): use cfg.Stomp and openPool", f, own)
			}
		}
		if f != "database.go" && bytes.Contains(src, []byte("pgxpool.NewWithConfig(")) {
			t.Errorf("%s opens a pool of its own: use openPool", f)
		}
	}
}
