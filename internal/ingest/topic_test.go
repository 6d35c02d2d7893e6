package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/loadgen"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// merge adds up what several plans published to one destination must produce.
func merge(exps ...loadgen.Expected) loadgen.Expected {
	out := loadgen.Expected{Destination: exps[0].Destination, Malformed: map[message.Reason]int{}}
	for _, e := range exps {
		out.Sent += e.Sent
		out.Duplicates += e.Duplicates
		out.IDs = append(out.IDs, e.IDs...)
		out.QuarantineIDs = append(out.QuarantineIDs, e.QuarantineIDs...)
		for r, n := range e.Malformed {
			out.Malformed[r] += n
		}
	}
	return out
}

func topicName() string { return "/topic/inboxd-test.topic." + testenv.Suffix() }

func durableConfig(addr, topic string) Config {
	return Config{Addr: addr, Destinations: []string{topic}, ClientID: "inboxd-test-" + testenv.Suffix(),
		SubscriptionName: "inboxd", BatchSize: 25, Linger: 2 * time.Millisecond}
}

// gate blocks the subscriber right before SUBSCRIBE once armed, so a test can publish
// in the window between a reconnect and its resubscribe.
type gate struct {
	armed   atomic.Bool
	reached chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) hook(context.Context, string) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.reached)
		<-g.release
	}
}

// TestTopicEventsSurviveDowntime is the finding: events published to a topic
// while inboxd is stopped, and while it reconnects after a broker restart (kill -9),
// must all be journaled, on ActiveMQ and on RabbitMQ. A non-durable subscription (opted in) shows the loss the durable one avoids.
func TestTopicEventsSurviveDowntime(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private broker twice")
	}
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *testenv.PrivateBroker
	}{{"activemq", testenv.StartPrivateBroker}, {"rabbitmq", testenv.StartPrivateRabbit}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			broker := tc.start(t)
			db := testenv.NewDB(t)
			topic := topicName()
			cfg := durableConfig(broker.Addr, topic)

			r1 := startSubscriber(t, cfg, db.Pool, hooks{})
			testenv.Eventually(t, 30*time.Second, "subscribed", r1.Ready)
			live := publishPlan(t, broker.Addr, topic, 200, 0.2, 0.02, 101)
			waitExact(t, db.Pool, live, 30*time.Second)
			r1.stop(t)

			stopped := publishPlan(t, broker.Addr, topic, 200, 0.2, 0.02, 102) // inboxd is stopped
			g := newGate()
			r2 := startSubscriber(t, cfg, db.Pool, hooks{beforeSubscribe: g.hook})
			waitExact(t, db.Pool, merge(live, stopped), 30*time.Second)

			var queues []string // RabbitMQ's: the subscription's queue
			if tc.name == "rabbitmq" {
				queues = broker.RunningQueues(t)
				if len(queues) == 0 {
					t.Fatal("the durable subscription has no queue on the RabbitMQ node")
				}
				broker.SyncMetadata(t) // declared a moment ago: on disk before the kill
			}
			g.armed.Store(true)
			broker.Kill()
			testenv.Eventually(t, 30*time.Second, "subscriber notices the dead broker", func() bool { return !r2.Ready() })
			broker.Start()
			select {
			case <-g.reached:
			case <-time.After(60 * time.Second):
				t.Fatal("subscriber did not reconnect to the restarted broker")
			}
			// Connected with its client id, not subscribed yet: a non-durable subscriber would
			// not exist on the broker now. RabbitMQ answers STOMP before it has recovered its
			// durable queues, and drops what is published to a topic meanwhile
			// (PrivateBroker.RunningQueues): a publisher's loss, not inboxd's, so the test
			// publishes once the subscription's queue is back.
			if queues != nil {
				began := time.Now()
				testenv.Eventually(t, 90*time.Second, "RabbitMQ recovered the subscription's queue", func() bool {
					running := broker.RunningQueues(t)
					return len(running) > 0 && slices.Equal(slices.Sorted(slices.Values(running)), slices.Sorted(slices.Values(queues)))
				})
				t.Logf("RabbitMQ's queues running %s after inboxd reconnected", time.Since(began).Round(time.Millisecond))
			}
			reconnecting := publishPlan(t, broker.Addr, topic, 200, 0.2, 0.02, 103)
			close(g.release)
			all := merge(live, stopped, reconnecting)
			waitExact(t, db.Pool, all, 60*time.Second)
			r2.stop(t)
			t.Logf("journaled %d unique events of %d published (%d duplicates, %d malformed quarantined): "+
				"%d while running, %d while stopped, %d while reconnecting after a broker restart",
				len(all.IDs), all.Sent, all.Duplicates, all.MalformedCount(), live.Sent, stopped.Sent, reconnecting.Sent)
		})
	}
}

// TestNonDurableTopicLosesEvents reproduces the issue with the explicit opt-in: what is
// published while inboxd is stopped never arrives.
func TestNonDurableTopicLosesEvents(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	topic := topicName()
	cfg := Config{Addr: addr, Destinations: []string{topic}, NonDurableTopics: true, BatchSize: 25, Linger: 2 * time.Millisecond}
	r1 := startSubscriber(t, cfg, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "subscribed", r1.Ready)
	live := publishPlan(t, addr, topic, 100, 0, 0, 111)
	waitExact(t, db.Pool, live, 30*time.Second)
	r1.stop(t)
	publishPlan(t, addr, topic, 100, 0, 0, 112)
	r2 := startSubscriber(t, cfg, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "subscribed", r2.Ready)
	marker := publishPlan(t, addr, topic, 1, 0, 0, 113) // arrives after everything sent before it
	testenv.Eventually(t, 30*time.Second, "marker journaled", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal WHERE id = $1::UUID`, marker.IDs[0]) == 1
	})
	r2.stop(t)
	if n := count(t, db.Pool, `SELECT count(*) FROM journal`); n != 101 {
		t.Fatalf("journal holds %d events, want 101: the 100 published while stopped are lost non-durably", n)
	}
}

// TestNonDurableTopicRefused: a topic without a durable identity and without the opt-in
// is refused before anything connects, saying why.
func TestNonDurableTopicRefused(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		refused bool
	}{
		{"no client id", Config{Destinations: []string{"/topic/x"}, SubscriptionName: "inboxd"}, true},
		{"no subscription name", Config{Destinations: []string{"/topic/x"}, ClientID: "inboxd"}, true},
		{"second destination is a topic", Config{Destinations: []string{"/queue/q", "/topic/x"}}, true},
		{"durable", Config{Destinations: []string{"/topic/x"}, ClientID: "inboxd", SubscriptionName: "inboxd"}, false},
		{"opted in", Config{Destinations: []string{"/topic/x"}, NonDurableTopics: true}, false},
		{"queue needs no client id", Config{Destinations: []string{"/queue/q"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Addr = "127.0.0.1:1"
			_, err := New(tt.cfg, nil)
			if tt.refused {
				if !errors.Is(err, ErrNonDurableTopic) || !strings.Contains(err.Error(), "lost") {
					t.Fatalf("New = %v, want ErrNonDurableTopic saying events would be lost", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New = %v, want nil", err)
			}
		})
	}
}

func TestDurableFor(t *testing.T) {
	got := DurableFor("billing", "inboxd", "/topic/registrations")
	want := Durable{ClientID: "billing.registrations", Name: "inboxd", Destination: "/topic/registrations"}
	if got != want {
		t.Errorf("DurableFor = %+v, want %+v", got, want)
	}
}

// TestSecondInstanceIsStandby: a second subscriber with the same client id cannot
// consume the durable subscription (ActiveMQ refuses its CONNECT with
// InvalidClientIDException). It waits as a standby, not ready, and takes over when the
// first stops; nothing is lost or journaled twice.
func TestSecondInstanceIsStandby(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	topic := topicName()
	cfg := durableConfig(addr, topic)
	cfg.Backoff = backoff.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}
	first := startSubscriber(t, cfg, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "first subscribed", first.Ready)
	second := startSubscriber(t, cfg, db.Pool, hooks{})

	a := publishPlan(t, addr, topic, 150, 0.2, 0.02, 121)
	waitExact(t, db.Pool, a, 30*time.Second)
	if second.Ready() || second.counter("received", topic) != 0 {
		t.Fatalf("second instance: ready=%v, received %v; want a standby that consumes nothing",
			second.Ready(), second.counter("received", topic))
	}
	first.stop(t)
	b := publishPlan(t, addr, topic, 150, 0.2, 0.02, 122)
	testenv.Eventually(t, 30*time.Second, "standby takes over", second.Ready)
	all := merge(a, b)
	waitExact(t, db.Pool, all, 30*time.Second)
	second.stop(t)
	t.Logf("first instance received %v, standby received %v after taking over; journal exact with %d events",
		first.counter("received", topic), second.counter("received", topic), len(all.IDs))
}

// TestVirtualTopicTwoInstances is the scale-out path: producers publish to
// /topic/VirtualTopic.X with JMSXGroupID, and two instances compete on the consumer
// queue /queue/Consumer.<app>.VirtualTopic.X. The journal must hold exactly the unique
// events, and every aggregate's events in publish order.
func TestVirtualTopicTwoInstances(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	name := "VirtualTopic.inboxd-test." + testenv.Suffix()
	topic, queue := "/topic/"+name, "/queue/Consumer.inboxd."+name
	cfg := Config{Addr: addr, Destinations: []string{queue}, BatchSize: 20, Linger: 2 * time.Millisecond}
	a := startSubscriber(t, cfg, db.Pool, hooks{})
	b := startSubscriber(t, cfg, db.Pool, hooks{})
	// The consumer queue exists once subscribed: only then does the topic copy to it.
	testenv.Eventually(t, 30*time.Second, "both subscribed", func() bool { return a.Ready() && b.Ready() })

	const aggregates = 40
	events := aggregateEvents(aggregates, 25)
	sent, dups := publishAggregates(t, addr, topic, events)

	testenv.Eventually(t, 60*time.Second, "every unique event journaled", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal WHERE tag = $1`, queue) == len(events)
	})
	testenv.Eventually(t, 30*time.Second, "every message acked", func() bool {
		return a.counter("acked", queue)+b.counter("acked", queue) == float64(sent)
	})
	if n := count(t, db.Pool, `SELECT count(*) FROM journal`); n != len(events) {
		t.Fatalf("journal holds %d rows, want exactly %d", n, len(events))
	}
	assertAggregateOrder(t, db.Pool)
	ra, rb := a.counter("received", queue), b.counter("received", queue)
	if ra == 0 || rb == 0 {
		t.Errorf("received %v and %v: both instances should have consumed", ra, rb)
	}
	a.stop(t)
	b.stop(t)
	t.Logf("published %d messages (%d unique, %d duplicates) over %d aggregates to %s; instances received %v + %v; journal exact, per-aggregate order kept",
		sent, len(events), dups, aggregates, topic, ra, rb)
}

// TestDurableTopicAcrossRestart, on each broker: what is published to a topic while
// inboxd is stopped is journaled once it is back. ActiveMQ keeps it for the client id
// and subscription name; RabbitMQ for the subscription id, in the durable,
// non-auto-delete queue that durable:true and auto-delete:false declare.
func TestDurableTopicAcrossRestart(t *testing.T) {
	t.Parallel()
	testenv.EachBroker(t, func(t *testing.T, b testenv.BrokerEnv) {
		db := testenv.NewDB(t)
		topic := topicName()
		cfg := durableConfig(b.Addr, topic)
		r1 := startSubscriber(t, cfg, db.Pool, hooks{})
		testenv.Eventually(t, 30*time.Second, "subscribed", r1.Ready)
		live := publishPlan(t, b.Addr, topic, 150, 0.2, 0.02, 121)
		waitExact(t, db.Pool, live, 30*time.Second)
		r1.stop(t)

		stopped := publishPlan(t, b.Addr, topic, 150, 0.2, 0.02, 122) // inboxd is stopped
		r2 := startSubscriber(t, cfg, db.Pool, hooks{})
		waitExact(t, db.Pool, merge(live, stopped), 30*time.Second)
		r2.stop(t)
	})
}

// aggEvent is one event of an aggregate, seq its place in the aggregate's order.
type aggEvent struct {
	id, agg string
	seq     int
}

// aggregateEvents makes perAggregate events for each of aggregates aggregates,
// interleaved as publish order: every aggregate's first, then every second, and so on.
func aggregateEvents(aggregates, perAggregate int) []aggEvent {
	var events []aggEvent
	for s := range perAggregate {
		for g := range aggregates {
			events = append(events, aggEvent{id: message.NewID(), agg: fmt.Sprintf("agg-%d", g), seq: s})
		}
	}
	return events
}

// publishAggregates publishes events in order on one connection, with JMSXGroupID set
// to the aggregate, every fifth sent again right after, as a producer retry would. It
// returns the messages sent and the duplicates among them.
func publishAggregates(t *testing.T, addr, dest string, events []aggEvent) (sent, dups int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	p := stompx.NewPublisher(brokerCfg(addr), 1) // one connection: the broker keeps its order
	defer p.Close()
	for i, e := range events {
		body, _ := json.Marshal(map[string]any{"id": e.id, "type": "vt", "aggregateId": e.agg, "seq": e.seq})
		h := map[string]string{"JMSXGroupID": e.agg}
		times := 1
		if i%5 == 0 {
			times = 2
		}
		for range times {
			if err := p.Publish(ctx, dest, body, h); err != nil {
				t.Fatalf("publishing to %s: %v", dest, err)
			}
			sent++
		}
		dups += times - 1
	}
	return sent, dups
}

// assertAggregateOrder checks that per aggregate, sequence_no order is publish order.
func assertAggregateOrder(t *testing.T, db database.DB) {
	t.Helper()
	if n := count(t, db, `SELECT count(*) FROM (
		SELECT (payload->>'seq')::INT AS seq, lag((payload->>'seq')::INT) OVER (PARTITION BY aggregate_id ORDER BY sequence_no) AS prev
		FROM journal) s WHERE prev IS NOT NULL AND seq <= prev`); n != 0 {
		t.Fatalf("%d events journaled out of their aggregate's publish order", n)
	}
}
