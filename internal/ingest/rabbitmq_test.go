package ingest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestRabbitMQSingleActiveConsumerKeepsOrder: RabbitMQ has no message groups, so two
// instances competing on one queue may journal an aggregate's events out of order.
// What holds there is a queue declared with x-single-active-consumer (declared outside
// STOMP: the plugin cannot set that argument), consumed as /amq/queue/<name>: RabbitMQ
// delivers to one consumer at a time and hands the queue, unacked messages first, to
// the next when it goes. The journal must hold exactly the unique events, in every
// aggregate's publish order, across the active instance's shutdown mid-stream.
func TestRabbitMQSingleActiveConsumerKeepsOrder(t *testing.T) {
	t.Parallel()
	r := testenv.Rabbit(t)
	db := testenv.NewDB(t)
	name := "inboxd-test.sac." + testenv.Suffix()
	testenv.DeclareRabbitQueue(t, name, map[string]any{"x-single-active-consumer": true})
	dest := "/amq/queue/" + name
	cfg := Config{Addr: r.Addr, Destinations: []string{dest}, BatchSize: 20, Linger: 2 * time.Millisecond}
	// One instance writes slowly: were both consuming, its events would be journaled
	// after later ones of the same aggregates that the other took (checked: with this
	// test on a plain /queue/, 15 events of 1,025 were journaled out of order).
	slow := hooks{beforeIngest: func(context.Context, string, int) { time.Sleep(5 * time.Millisecond) }}
	a := startSubscriber(t, cfg, db.Pool, slow)
	b := startSubscriber(t, cfg, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "both subscribed", func() bool { return a.Ready() && b.Ready() })

	// An odd number of aggregates: RabbitMQ's round robin over two consumers would
	// otherwise hand each aggregate to one of them.
	events := aggregateEvents(41, 25)
	half := len(events) / 2
	sent1, dups1 := publishAggregates(t, r.Addr, dest, events[:half])
	testenv.Eventually(t, 30*time.Second, "the first half journaled", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) == half
	})
	active, standby := a, b
	if b.counter("received", dest) > 0 {
		active, standby = b, a
	}
	if standby.counter("received", dest) != 0 {
		t.Fatalf("both instances received (%v and %v): the queue has no single active consumer",
			a.counter("received", dest), b.counter("received", dest))
	}
	active.stop(t) // the standby takes over
	sent2, dups2 := publishAggregates(t, r.Addr, dest, events[half:])

	testenv.Eventually(t, 60*time.Second, "every unique event journaled", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) == len(events)
	})
	testenv.Eventually(t, 30*time.Second, "every message acked", func() bool {
		return a.counter("acked", dest)+b.counter("acked", dest) == float64(sent1+sent2)
	})
	assertAggregateOrder(t, db.Pool)
	standby.stop(t)
	t.Logf("published %d messages (%d unique, %d duplicates); the active instance received %v, then the standby %v; per-aggregate order kept",
		sent1+sent2, len(events), dups1+dups2, active.counter("received", dest), standby.counter("received", dest))
}

// TestRabbitMQDialectNotes: on RabbitMQ, id-source header:message-id is warned about
// (the header changes on redelivery), and a queue's missing message groups are noted,
// once per destination.
func TestRabbitMQDialectNotes(t *testing.T) {
	t.Parallel()
	r := testenv.Rabbit(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	src, err := message.ParseIDSource("header:message-id")
	if err != nil {
		t.Fatal(err)
	}
	var logs testenv.Buffer
	rs := startSubscriber(t, Config{Addr: r.Addr, Destinations: []string{q}, IDSource: src,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "subscribed", rs.Ready)
	rs.stop(t)
	out := logs.String()
	for _, want := range []string{"changes on redelivery", "has no message groups"} {
		if strings.Count(out, want) != 1 {
			t.Errorf("logs say %q %d times, want once:\n%s", want, strings.Count(out, want), out)
		}
	}
}

// TestRabbitMQSingleActiveConsumerKill: the active instance is killed (kill -9) with a
// committed batch unacked; RabbitMQ requeues what it held, in its place, and the next
// instance journals the rest exactly and in every aggregate's publish order.
func TestRabbitMQSingleActiveConsumerKill(t *testing.T) {
	t.Parallel()
	r := testenv.Rabbit(t)
	db := testenv.NewDB(t)
	name := "inboxd-test.sac-kill." + testenv.Suffix()
	testenv.DeclareRabbitQueue(t, name, map[string]any{"x-single-active-consumer": true})
	dest := "/amq/queue/" + name
	events := aggregateEvents(41, 25)
	publishAggregates(t, r.Addr, dest, events)

	runAndKill(t, "block-after-commit", db.URL, r.Addr, dest, envHelperAfter+"=10")
	mid := count(t, db.Pool, `SELECT count(*) FROM journal`)
	if mid == 0 || mid >= len(events) {
		t.Fatalf("after the kill, %d events are journaled; want a part of the stream", mid)
	}
	next := startSubscriber(t, Config{Addr: r.Addr, Destinations: []string{dest}, BatchSize: crashBatch, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
	testenv.Eventually(t, 60*time.Second, "every unique event journaled", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) == len(events)
	})
	next.stop(t)
	assertAggregateOrder(t, db.Pool)
	assertDrained(t, r.Addr, dest)
}
