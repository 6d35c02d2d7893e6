package ingest

import (
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

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

// go-stomp's Unsubscribe can miss the wakeup of its own receipt: its waiter is a
// goroutine that starts waiting on the subscription's condition after the call has
// checked the state, and the receipt's broadcast does not take the condition's lock
// (v3.1.5, subscription.go: waitWithTimeout, closeChannel). The subscription has ended,
// but Unsubscribe waits out its whole receipt timeout (10 s), and dropping the
// connection does not end it. Under CPU load this held a stop past a 10 s shutdown
// budget (TestUpgradeFromJournalBefore0007 in CI: "still running: health, ingest, …").
// The hook sends the real UNSUBSCRIBE, then never returns, as such a call does.
func TestStopNotHeldByAnUnsubscribeThatMissesItsReceipt(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h := hooks{unsubscribe: func(sub *stomp.Subscription) error {
		go func() { _ = sub.Unsubscribe() }()
		<-release
		return nil
	}}
	const stopTimeout = 5 * time.Second
	r := startSubscriber(t, withBroker(Config{Addr: testenv.Broker(t), Destinations: []string{q}, StopTimeout: stopTimeout}), db.Pool, h)
	publish(t, testenv.Broker(t), q, []byte(`{"id":"00000000-0000-4000-8000-000000000002"}`), nil)
	testenv.Eventually(t, 30*time.Second, "the message journaled and acked", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) == 1 && r.counter("acked", q) == 1
	})
	start := time.Now()
	r.stop(t)
	if took := time.Since(start); took > stopTimeout/2 {
		t.Errorf("stop took %s although the subscription had ended; want well under StopTimeout (%s), which drops the connection", took.Round(time.Millisecond), stopTimeout)
	}
}
