package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestServeStopsWithTheDatabaseFrozen: SIGTERM while the database hangs (a blackholed
// path: nothing answers, nothing closes), a commit in flight, ends serve within
// INBOXD_SHUTDOWN_TIMEOUT + 2 s, the pool's close included. Issue 27 measured 41.7 s at
// a 10 s timeout: the commit ran on under its own 30 s timeout, then pool.Close waited
// up to 15 s for pgx's cancel request to the hung server.
func TestServeStopsWithTheDatabaseFrozen(t *testing.T) {
	const shutdown = 2 * time.Second
	db := testenv.NewDB(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.StartFreezeProxy(t, u.Host)
	u.Host = proxy.Addr
	q, httpAddr := testenv.Queue(t), testenv.FreeAddr(t)
	var stderr testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runServe(ctx, &env{stdout: &stderr, stderr: &stderr}, []string{
			"-database-url", u.String(), "-stomp-addr", testenv.Broker(t), "-destination", q,
			"-http-addr", httpAddr, "-webhook-addr", "", "-shutdown-timeout", shutdown.String(),
			"-cert-dir", t.TempDir(), "-log-level", "warn"})
	}()
	testenv.Eventually(t, 60*time.Second, "serve ready", func() bool {
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	proxy.Freeze()
	p := stompx.NewPublisher(stompx.Config{Addr: testenv.Broker(t)}, 1)
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	for i := range 20 {
		if err := p.Publish(pctx, q, fmt.Appendf(nil, `{"id":"00000000-0000-4000-8000-%012d","type":"x"}`, i), nil); err != nil {
			t.Fatal(err)
		}
	}
	pcancel()
	p.Close()
	time.Sleep(300 * time.Millisecond) // ingest's commit reaches the frozen database (not a wait for an outcome)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("serve returned %v %s after the stop", err, took.Round(time.Millisecond))
		if took > shutdown+2*time.Second {
			t.Errorf("the stop took %s, want within the shutdown timeout + 2 s (%s)\n%s", took, shutdown+2*time.Second, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("serve did not return within a minute of the stop\n%s", stderr.String())
	}
	proxy.Thaw()
}
