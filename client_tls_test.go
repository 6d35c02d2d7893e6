package inboxd_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

func tlsGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every broker connection of a running inboxd goes over mutual TLS: ingest, the
// publisher behind POST /registration, and /readyz. With a CA the broker's certificate
// does not chain to, /readyz says the broker is down.
func TestServiceOverTLS(t *testing.T) {
	t.Parallel()
	b := testenv.SharedBrokerTLS(t)
	for _, tc := range []struct {
		name      string
		files     stompx.TLSFiles
		wantReady int
	}{
		{"mutual TLS", stompx.TLSFiles{CAFile: b.CAFile, CertFile: b.CertFile, KeyFile: b.KeyFile}, http.StatusOK},
		{"name mismatch", stompx.TLSFiles{CAFile: b.CAFile, CertFile: b.CertFile, KeyFile: b.KeyFile, ServerName: "elsewhere.example"}, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := testenv.NewDB(t)
			queue := testenv.Queue(t)
			api := testenv.FreeAddr(t)
			startService(t, db, queue, func(c *inboxd.Config) {
				c.DisableWebhook = true
				c.HTTPAddr = api
				c.StompAddr = b.MutualAddr
				c.StompTLS, c.StompCAFile, c.StompCertFile, c.StompKeyFile = true, tc.files.CAFile, tc.files.CertFile, tc.files.KeyFile
				c.StompServerName = tc.files.ServerName
			})
			base := "http://" + api
			testenv.Eventually(t, 30*time.Second, "the API answers", func() bool {
				resp, err := http.Get(base + "/healthz")
				if err == nil {
					resp.Body.Close()
				}
				return err == nil
			})
			// Ingest is ready only once the broker confirmed its SUBSCRIBE: poll.
			var code int
			var body string
			deadline := time.Now().Add(30 * time.Second)
			for {
				if code, body = tlsGet(t, base+"/readyz"); code == tc.wantReady || time.Now().After(deadline) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if code != tc.wantReady {
				t.Fatalf("/readyz = %d %s, want %d", code, body, tc.wantReady)
			}
			if tc.wantReady != http.StatusOK {
				return
			}
			_, form := tlsGet(t, base+"/registration/form")
			resp, err := http.Post(base+"/registration", "application/json", bytes.NewBufferString(form))
			if err != nil {
				t.Fatal(err)
			}
			out, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST /registration = %d %s", resp.StatusCode, out)
			}
			testenv.Eventually(t, 60*time.Second, "the registration published over TLS, ingested over TLS and processed", func() bool {
				return countOf(t, db, `SELECT count(*) FROM journal_state WHERE status = 'PROCESSED'`) == 1
			})
		})
	}
}
