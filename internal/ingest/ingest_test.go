package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestConfigValidation(t *testing.T) {
	base := Config{Addr: "127.0.0.1:1", Destinations: []string{"/queue/a"}}
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"no address", func(c *Config) { c.Addr = "" }, "address"},
		{"no destination", func(c *Config) { c.Destinations = nil }, "destination"},
		{"repeated destination", func(c *Config) { c.Destinations = []string{"/queue/a", "/queue/a"} }, "repeated"},
		{"prefetch not above batch", func(c *Config) { c.BatchSize, c.Prefetch = 100, 100 }, "prefetch"},
		{"unknown ack mode", func(c *Config) { c.AckMode = "auto" }, "ack mode"},
		{"cumulative", func(c *Config) { c.AckMode = AckCumulative }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := base
			tt.mutate(&cfg)
			_, err := New(cfg, nil)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("New: error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// TestIngestExact runs the loadgen mix through every ack mode and a few batch sizes.
func TestIngestExact(t *testing.T) {
	addr := testenv.Broker(t)
	tests := []struct {
		ack   AckMode
		batch int
	}{
		{AckIndividual, 1},
		{AckIndividual, 64},
		{AckCumulative, 1},
		{AckCumulative, 64},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/batch%d", tt.ack, tt.batch), func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t)
			q := testenv.Queue(t)
			exp := publishPlan(t, addr, q, 400, 0.25, 0.04, 7)
			r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, AckMode: tt.ack,
				BatchSize: tt.batch, Linger: 5 * time.Millisecond}, db.Pool, hooks{})
			r.finishExact(t, db.Pool, q, exp)
			if got := r.counter("duplicates", q); got != float64(exp.Duplicates) {
				t.Errorf("duplicates counted = %v, want %d", got, exp.Duplicates)
			}
			assertDrained(t, addr, q)
		})
	}
}

func TestDuplicatesCollapse(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	const id = "0b9b7c1e-7d4e-4f6a-9d35-6f3f1c2a9e10"
	body := fmt.Sprintf(`{"id":%q,"type":"registration","name":"x"}`, id)
	// The same event five times, the last one reformatted: same id, same JSON value.
	for range 4 {
		publish(t, addr, q, []byte(body), nil)
	}
	publish(t, addr, q, []byte(fmt.Sprintf(`{ "name":"x", "type":"registration", "id":%q }`, id)), nil)
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 2, Linger: time.Millisecond}, db.Pool, hooks{})
	testenv.Eventually(t, 20*time.Second, "all five acked", func() bool { return r.counter("acked", q) == 5 })
	r.stop(t)
	if n := count(t, db.Pool, `SELECT count(*) FROM journal WHERE id = $1`, id); n != 1 {
		t.Errorf("journal rows for %s = %d, want 1", id, n)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine`); n != 0 {
		t.Errorf("quarantine rows = %d, want 0", n)
	}
	if got := r.counter("duplicates", q); got != 4 {
		t.Errorf("duplicates counted = %v, want 4", got)
	}
	if got := r.counter("committed", q); got != 1 {
		t.Errorf("committed = %v, want 1", got)
	}
	assertDrained(t, addr, q)
}

func TestBadInputIsQuarantinedAndAcked(t *testing.T) {
	t.Parallel()
	testenv.EachBroker(t, func(t *testing.T, b testenv.BrokerEnv) {
		addr := b.Addr
		db := testenv.NewDB(t)
		q := testenv.Queue(t)
		const maxBody = 1024
		const conflictID = "5d7e4a0c-2f0b-4c1e-8a8e-3c9f5e1d2a77"
		first := fmt.Sprintf(`{"id":%q,"v":1}`, conflictID)
		tests := []struct {
			name   string
			body   []byte
			reason message.Reason
		}{
			{"not json", []byte("hello, \xff world"), message.ReasonNotJSON},
			{"not an object", []byte(`[1,2,3]`), message.ReasonNotObject},
			{"missing id", []byte(`{"type":"registration"}`), message.ReasonMissingID},
			{"empty id", []byte(`{"id":""}`), message.ReasonInvalidID},
			{"numeric id", []byte(`{"id":12345}`), message.ReasonInvalidID},
			{"oversize", []byte(fmt.Sprintf(`{"id":"8a1e2b3c-4d5e-4f60-8a7b-8c9d0e1f2a3b","pad":%q}`, strings.Repeat("x", maxBody))), message.ReasonTooLarge},
			{"same id, other payload", []byte(fmt.Sprintf(`{"id":%q,"v":2}`, conflictID)), message.ReasonIDConflict},
		}
		// The first payload of conflictID is ingested before the conflicting one.
		publish(t, addr, q, []byte(first), nil)
		r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, MaxBodyBytes: maxBody, BatchSize: 4, Linger: time.Millisecond}, db.Pool, hooks{})
		testenv.Eventually(t, 20*time.Second, "first payload journaled", func() bool {
			return count(t, db.Pool, `SELECT count(*) FROM journal`) == 1
		})
		for _, tt := range tests {
			publish(t, addr, q, tt.body, map[string]string{"x-test-case": tt.name})
		}
		testenv.Eventually(t, 20*time.Second, "all messages acked", func() bool {
			return r.counter("acked", q) == float64(len(tests)+1)
		})
		r.stop(t)
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				id := message.QuarantineID(tt.reason, q, tt.body)
				var reason, detail, dest, msgID, caseHeader string
				var body []byte
				err := db.Pool.QueryRow(context.Background(),
					`SELECT reason, detail, destination, message_id, coalesce(headers->>'x-test-case', ''), body FROM quarantine WHERE id = $1`, id).
					Scan(&reason, &detail, &dest, &msgID, &caseHeader, &body)
				if err != nil {
					t.Fatalf("quarantine row %s (%s): %v", id, tt.reason, err)
				}
				if string(body) != string(tt.body) {
					t.Errorf("body = %.60q, want the raw %.60q", body, tt.body)
				}
				if reason != string(tt.reason) || detail == "" || dest != q {
					t.Errorf("reason, detail, destination = %q, %q, %q; want %q, non-empty, %q", reason, detail, dest, tt.reason, q)
				}
				// A conflict is found by the database, which no longer has the STOMP headers.
				if tt.reason != message.ReasonIDConflict && (msgID == "" || caseHeader != tt.name) {
					t.Errorf("message_id %q, header x-test-case %q: STOMP headers not kept", msgID, caseHeader)
				}
			})
		}
		if n := count(t, db.Pool, `SELECT count(*) FROM quarantine`); n != len(tests) {
			t.Errorf("quarantine rows = %d, want %d", n, len(tests))
		}
		var payload string
		if err := db.Pool.QueryRow(context.Background(), `SELECT payload::TEXT FROM journal WHERE id = $1`, conflictID).Scan(&payload); err != nil || !strings.Contains(payload, `"v": 1`) {
			t.Errorf("journal keeps %q (%v), want the first payload", payload, err)
		}
		assertDrained(t, addr, q)
	})
}

// TestGracefulShutdownMidStream cancels Run while messages are flowing: Run returns nil,
// and a second subscriber finishes the job exactly (nothing lost, nothing twice).
func TestGracefulShutdownMidStream(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	exp := publishPlan(t, addr, q, 600, 0.2, 0.02, 11)
	first := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 20, Linger: time.Millisecond}, db.Pool, hooks{})
	testenv.Eventually(t, 20*time.Second, "some rows committed", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) > 0
	})
	first.stop(t)
	if first.Ready() {
		t.Error("Ready() after Run returned")
	}
	second := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 20, Linger: time.Millisecond}, db.Pool, hooks{})
	waitExact(t, db.Pool, exp, 30*time.Second)
	testenv.Eventually(t, 10*time.Second, "every message acked once", func() bool {
		return first.counter("acked", q)+second.counter("acked", q) == float64(exp.Sent)
	})
	second.stop(t)
	assertDrained(t, addr, q)
}

// With several batches written at once, the events of one aggregate must still get
// sequence numbers (the processing order) in broker order.
func TestAggregateOrderWithCommitsInFlight(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	const aggregates, perAggregate = 5, 60
	pub := stompx.NewPublisher(stompx.Config{Addr: addr}, 1) // one connection: the broker keeps its order
	t.Cleanup(func() { pub.Close() })
	for n := 0; n < perAggregate; n++ {
		for a := 0; a < aggregates; a++ {
			body := fmt.Sprintf(`{"id":%q,"aggregateId":"agg-%d","n":%d}`, message.NewID(), a, n)
			if err := pub.Publish(context.Background(), q, []byte(body), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, BatchSize: 7, Linger: time.Millisecond,
		CommitsInFlight: 3, AckMode: AckCumulative}, db.Pool, hooks{})
	testenv.Eventually(t, 30*time.Second, "all journaled", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) == aggregates*perAggregate
	})
	r.stop(t)
	rows, err := db.Pool.Query(context.Background(),
		`SELECT aggregate_id, (payload->>'n')::INT FROM journal ORDER BY aggregate_id, sequence_no`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last := map[string]int{}
	for rows.Next() {
		var agg string
		var n int
		if err := rows.Scan(&agg, &n); err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[agg]; ok && n != prev+1 {
			t.Errorf("%s: event %d follows event %d in sequence order", agg, n, prev)
		}
		last[agg] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
