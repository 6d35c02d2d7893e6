package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/inboxd/inboxd/internal/ingest"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// durableConsumer attaches to a durable subscription the way ingest does, and returns
// a function that detaches (keeping the subscription).
func durableConsumer(t *testing.T, addr string, d ingest.Durable) (detach func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := stompx.DialConn(ctx, stompx.Config{Addr: addr, ClientID: d.ClientID})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := conn.Subscribe(d.Destination, stomp.AckClient, stomp.SubscribeOpt.Header(stompx.HeaderSubscriptionName, d.Name))
	if err != nil {
		t.Fatal(err)
	}
	done := false
	detach = func() {
		if !done {
			done = true
			_ = sub.Unsubscribe()
			_ = conn.Close()
		}
	}
	t.Cleanup(detach)
	return detach
}

func listed(t *testing.T, args ...string) map[string]subscriptionRow {
	t.Helper()
	code, out, errOut := run(t, append([]string{"subscriptions", "list", "-json"}, args...)...)
	if code != 0 {
		t.Fatalf("subscriptions list: exit %d: %s", code, errOut)
	}
	var rows []subscriptionRow
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("subscriptions list -json: %v\n%s", err, out)
	}
	m := map[string]subscriptionRow{}
	for _, r := range rows {
		m[r.ClientID+"/"+r.Name] = r
	}
	return m
}

// TestSubscriptionsListAndRemove drives the operator tool against the real broker: an
// abandoned durable subscription is listed as inactive and not configured, cannot be
// removed while consumed, is removed with the messages it held, and a configured one is
// protected unless -force.
func TestSubscriptionsListAndRemove(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	ctx := context.Background()
	sfx := testenv.Suffix()
	old := ingest.DurableFor("inboxd-cli-"+sfx, "inboxd", "/topic/inboxd-test.cli-old."+sfx)
	cur := ingest.DurableFor("inboxd-cli-"+sfx, "inboxd", "/topic/inboxd-test.cli-cur."+sfx)
	for _, d := range []ingest.Durable{old, cur} {
		if err := journal.RecordSubscription(ctx, db.Pool, d.ClientID, d.Name, d.Destination); err != nil {
			t.Fatal(err)
		}
	}
	detachOld := durableConsumer(t, addr, old)
	durableConsumer(t, addr, cur) // stays attached: an instance consuming it
	common := []string{"-database-url", db.URL, "-stomp-addr", addr, "-client-id", "inboxd-cli-" + sfx, "-destination", cur.Destination}

	rows := listed(t, common...)
	if r := rows[old.ClientID+"/inboxd"]; r.State != "active" || r.Configured {
		t.Fatalf("old subscription while consumed: %+v, want active, not configured", r)
	}
	code, _, errOut := run(t, append(append([]string{"subscriptions", "remove"}, common...), old.ClientID)...)
	if code != 1 || !strings.Contains(errOut, "stop it first") {
		t.Fatalf("remove while consumed: exit %d, %q; want a refusal naming the running consumer", code, errOut)
	}

	detachOld()
	publisher := stompx.NewPublisher(stompx.Config{Addr: addr}, 1)
	defer publisher.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := publisher.Publish(pctx, old.Destination, []byte(`{"id":"00000000-0000-4000-8000-000000000001"}`), nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "old subscription inactive", func() bool {
		return listed(t, common...)[old.ClientID+"/inboxd"].State == "inactive"
	})
	code, out, _ := run(t, append([]string{"subscriptions", "list"}, common...)...)
	if code != 0 || !strings.Contains(out, "subscriptions remove "+old.ClientID+" inboxd") {
		t.Errorf("list: exit %d, %q; want a hint to remove the abandoned subscription", code, out)
	}
	if r := rows[cur.ClientID+"/inboxd"]; r.State != "active" || !r.Configured {
		t.Errorf("current subscription: %+v, want active and configured", r)
	}

	code, out, errOut = run(t, append(append([]string{"subscriptions", "remove"}, common...), old.ClientID, "inboxd")...)
	if code != 0 || !strings.Contains(out, "removed durable subscription") {
		t.Fatalf("remove: exit %d, %q %q", code, out, errOut)
	}
	if r := listed(t, common...)[old.ClientID+"/inboxd"]; r.State != "removed" || r.RemovedAt == nil {
		t.Errorf("after remove: %+v, want removed", r)
	}
	// Gone on the broker too (ActiveMQ drops the messages a removed subscription held).
	err := stompx.RemoveDurable(ctx, stompx.Config{Addr: addr, ClientID: old.ClientID}, "inboxd", old.Destination)
	if err == nil || !strings.Contains(err.Error(), "no such durable subscription") {
		t.Errorf("removing again on the broker: %v, want ErrNoSuchSubscription", err)
	}
	code, _, errOut = run(t, append(append([]string{"subscriptions", "remove"}, common...), "never-heard-of-"+sfx)...)
	if code != 1 || !strings.Contains(errOut, "neither the broker nor inboxd's records") {
		t.Errorf("remove unknown: exit %d, %q", code, errOut)
	}
	code, _, errOut = run(t, append(append([]string{"subscriptions", "remove"}, common...), cur.ClientID)...)
	if code != 1 || !strings.Contains(errOut, "pass -force") {
		t.Errorf("remove configured without -force: exit %d, %q", code, errOut)
	}
}
