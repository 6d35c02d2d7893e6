package inboxd_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/certs"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
)

// Issue 10: with no token configured (the default), the webhook accepted anyone. Now
// a token is generated beside the CA and demanded; the attack is an unauthenticated
// resolved message that would move the watermark.
func TestWebhookNeverOpen(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	hookAddr := testenv.FreeAddr(t)
	certDir := t.TempDir()
	startService(t, db, testenv.Queue(t), func(c *inboxd.Config) {
		c.WebhookAddr, c.WebhookToken, c.CertDir = hookAddr, "", certDir
		c.DisableWebhook = false
	})
	tokenFile := filepath.Join(certDir, certs.WebhookTokenFile)
	testenv.Eventually(t, 30*time.Second, "the webhook starts", func() bool {
		c, err := net.Dial("tcp", hookAddr) // listening comes after the token is written
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	fi, err := os.Stat(tokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("generated token file: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(raw))

	ca, err := os.ReadFile(filepath.Join(certDir, certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(client.CloseIdleConnections)
	post := func(auth string) int {
		req, _ := http.NewRequest(http.MethodPost, "https://"+hookAddr+webhook.Path, bytes.NewReader([]byte(`{"resolved":"1700000000000000000.0000000000"}`)))
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	if code := post("Bearer guess"); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d, want 401", code)
	}
	if code := post("Bearer " + token); code != http.StatusOK {
		t.Errorf("generated token: %d, want 200", code)
	}
	// changefeed create sends the same token.
	if got, created, err := certs.WebhookToken("", certDir); err != nil || created || got != token {
		t.Errorf("WebhookAuthToken = %q, %v, %v; want the generated one", got, created, err)
	}
}
