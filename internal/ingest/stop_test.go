package ingest

import (
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
)

// A broker that stops answering just before a shutdown (a frozen path; ActiveMQ under
// load took seconds per receipt) must not hold the stop past StopTimeout. Before, the
// UNSUBSCRIBE and DISCONNECT receipts were each waited for up to the receipt timeout
// (10 s), more than a whole shutdown budget: "shutdown did not finish" in CI.
func TestStopBoundedOnASilentBroker(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	proxy := testenv.StartFreezeProxy(t, testenv.Broker(t))
	t.Cleanup(proxy.Thaw)
	const stopTimeout = 300 * time.Millisecond
	cfg := withBroker(Config{Addr: testenv.Broker(t), Destinations: []string{q}, StopTimeout: stopTimeout})
	cfg.Addr = proxy.Addr
	r := startSubscriber(t, cfg, db.Pool, hooks{})
	publish(t, testenv.Broker(t), q, []byte(`{"id":"00000000-0000-4000-8000-000000000001"}`), nil)
	testenv.Eventually(t, 30*time.Second, "the message journaled and acked", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) == 1 && r.counter("acked", q) == 1
	})
	proxy.Freeze()
	start := time.Now()
	r.stop(t) // Run must return nil: dropping the connection loses nothing
	if took := time.Since(start); took > stopTimeout+2*time.Second {
		t.Errorf("stop took %s on a silent broker, want within StopTimeout (%s) + 2 s", took.Round(time.Millisecond), stopTimeout)
	}
}
