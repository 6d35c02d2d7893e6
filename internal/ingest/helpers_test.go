package ingest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/loadgen"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/testenv/stomptest"
)

func testLogger(t testing.TB) *slog.Logger {
	t.Helper()
	return testenv.Logger(t)
}

// running is a Subscriber started in the background.
type running struct {
	*Subscriber
	m      *metrics.Metrics
	cancel context.CancelFunc
	done   chan error
}

// brokerCfg is how the tests reach the test broker at addr, in its dialect.
func brokerCfg(addr string) stompx.Config { return stomptest.Config(addr) }

// withBroker fills in cfg's login, host and broker for the test broker at cfg.Addr.
func withBroker(cfg Config) Config {
	if cfg.Broker == "" {
		b := brokerCfg(cfg.Addr)
		cfg.Broker, cfg.Host = b.Broker, b.Host
		if cfg.Login == "" {
			cfg.Login, cfg.Passcode = b.Login, b.Passcode
		}
	}
	return cfg
}

// startSubscriber runs a Subscriber until stop or the end of the test.
func startSubscriber(t *testing.T, cfg Config, db database.DB, h hooks) *running {
	t.Helper()
	cfg = withBroker(cfg)
	m := metrics.New()
	cfg.Metrics = m
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	if cfg.Backoff.Initial == 0 {
		cfg.Backoff = backoff.Policy{Initial: 20 * time.Millisecond, Max: 500 * time.Millisecond}
	}
	if cfg.DefaultEventType == "" {
		cfg.DefaultEventType = "test" // the tests' payloads mostly name no type
	}
	s, err := New(cfg, db)
	if err != nil {
		t.Fatalf("ingest.New: %v", err)
	}
	s.hooks = h
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Subscriber: s, m: m, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- s.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and checks that it returns nil promptly.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of cancel")
	}
}

func (r *running) counter(name, label string) float64 {
	switch name {
	case "duplicates":
		return value(r.m.Duplicates.WithLabelValues(label))
	case "acked":
		return value(r.m.Acked.WithLabelValues(label))
	case "committed":
		return value(r.m.Committed.WithLabelValues(label))
	case "received":
		return value(r.m.Received.WithLabelValues(label))
	case "reconnects":
		return value(r.m.Reconnects.WithLabelValues(label))
	case "quarantined":
		return value(r.m.Quarantined.WithLabelValues(label))
	}
	panic("unknown counter " + name)
}

func value(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func count(t testing.TB, db database.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := testenv.Observe(context.Background(), db, func(q pgx.Tx) error {
		return q.QueryRow(context.Background(), sql, args...).Scan(&n)
	}); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// publish sends one persistent message and waits for the broker's receipt.
func publish(t testing.TB, addr, dest string, body []byte, headers map[string]string) {
	t.Helper()
	p := stompx.NewPublisher(brokerCfg(addr), 1)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Publish(ctx, dest, body, headers); err != nil {
		t.Fatalf("publishing to %s: %v", dest, err)
	}
}

// publishPlan publishes a loadgen plan and returns what ingest must produce.
func publishPlan(t testing.TB, addr, dest string, n int, dup, mal float64, seed uint64) loadgen.Expected {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	exp, err := loadgen.Publish(ctx, loadgen.Config{
		Broker: brokerCfg(addr), Destination: dest, Messages: n,
		DuplicateRatio: dup, MalformedRatio: mal, Seed: seed, Conns: 2, ReceiptEvery: 50,
	})
	if err != nil {
		t.Fatalf("loadgen.Publish: %v", err)
	}
	return exp
}

// waitExact polls until the journal and quarantine hold exactly what exp says.
func waitExact(t testing.TB, db database.DB, exp loadgen.Expected, within time.Duration) {
	t.Helper()
	var last error
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		last = loadgen.Verify(ctx, db, exp)
		cancel()
		if last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("ingest not exact after %s: %v", within, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finishExact waits until the journal holds exactly what exp says and the subscriber
// has acked every message once, then stops it.
func (r *running) finishExact(t *testing.T, db database.DB, dest string, exp loadgen.Expected) {
	t.Helper()
	waitExact(t, db, exp, 30*time.Second)
	testenv.Eventually(t, 10*time.Second, "every message acked", func() bool {
		return r.counter("acked", dest) == float64(exp.Sent)
	})
	r.stop(t)
}

// assertDrained proves that no message is left on dest, acked or not: with every
// consumer gone, a sentinel published now must be the first message a fresh consumer
// gets, since a queue hands unacked messages back in their original order.
func assertDrained(t testing.TB, addr, dest string) {
	t.Helper()
	sentinel := []byte("sentinel " + testenv.Suffix())
	publish(t, addr, dest, sentinel, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := stompx.DialConn(ctx, brokerCfg(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sub, err := conn.Subscribe(dest, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	select {
	case m := <-sub.C:
		if m.Err != nil {
			t.Fatalf("probing %s: %v", dest, m.Err)
		}
		if string(m.Body) != string(sentinel) {
			t.Fatalf("queue %s not drained: first message is %.80q (redelivered=%s), not the sentinel",
				dest, m.Body, m.Header.Get("redelivered"))
		}
	case <-ctx.Done():
		t.Fatalf("probing %s: no message within 10s", dest)
	}
}
