package cli

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
)

// TestServeOnPostgreSQLOpensNoWebhook: "serve" on PostgreSQL, with the webhook setting
// left unset, behaves as the library does: no changefeed webhook on :8443 and no
// certificates written under var/certs in its working directory.
func TestServeOnPostgreSQLOpensNoWebhook(t *testing.T) {
	db := testenv.NewDB(t)
	broker, q, httpAddr := testenv.Broker(t), testenv.Queue(t), testenv.FreeAddr(t)
	t.Setenv("INBOXD_WEBHOOK_ADDR", "")
	os.Unsetenv("INBOXD_WEBHOOK_ADDR") // restored by Setenv's cleanup
	dir := t.TempDir()
	t.Chdir(dir)
	// Whether :8443 was free before, so that another process holding it cannot fail this.
	free := func() bool {
		ln, err := net.Listen("tcp", ":8443")
		if err != nil {
			return false
		}
		ln.Close()
		return true
	}
	wasFree := free()
	var out testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, &env{stdout: &out, stderr: &out}, []string{
			"-database-url", db.URL, "-stomp-addr", broker, "-destination", q, "-http-addr", httpAddr})
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Errorf("serve did not stop within a minute\n%s", out.String())
		}
	}()
	testenv.Eventually(t, 60*time.Second, "serve ready", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	if wasFree && !free() {
		t.Errorf("serve on PostgreSQL listens on :8443\n%s", out.String())
	}
	cancel()
	<-done
	done <- nil // for the deferred stop
	if _, err := os.Stat(filepath.Join(dir, "var", "certs")); !os.IsNotExist(err) {
		t.Errorf("serve on PostgreSQL wrote var/certs (%v)\n%s", err, out.String())
	}
}
