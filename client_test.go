package inboxd_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/cli"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Bad settings get the command line's errors, from Validate (and New).
func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  inboxd.Config
		want string
	}{
		{"ack mode", inboxd.Config{AckMode: "auto"}, "ack-mode"},
		{"prefetch below batch", inboxd.Config{BatchSize: 100, Prefetch: 50}, "prefetch"},
		{"topic without durable names is fine by default", inboxd.Config{Destinations: []string{"/topic/x"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one naming %q", err, tt.want)
			}
		})
	}
	if _, err := inboxd.New(nil, inboxd.Config{}); err == nil {
		t.Error("inboxd.New(nil pool) did not fail")
	}
}

func httpStatus(t *testing.T, method, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The client's lifecycle against the real PostgreSQL and ActiveMQ: a handler set with
// Handle processes a published message; cancelling Run returns nil and leaves the
// caller's pool open; Run again on the same client, and a new client on the same
// database, process the next messages.
func TestClientLifecycle(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	queue := testenv.Queue(t)
	broker := testenv.Broker(t)
	ctx := context.Background()
	if err := inboxd.Migrate(ctx, db.Pool); err != nil { // again: idempotent
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id UUID PRIMARY KEY, total INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	handler := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, total) SELECT $1, (($2::JSONB)->>'total')::INT ON CONFLICT (id) DO NOTHING`, ev.ID, string(ev.Payload))
		return err
	})
	cfg := inboxd.Config{
		StompAddr: broker, Destinations: []string{queue}, Logger: testenv.Logger(t),
		HTTPAddr: testenv.FreeAddr(t), DisableWebhook: true,
		SweepInterval: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
		MetricsRegisterer: prometheus.NewRegistry(),
	}

	pub := stompx.NewPublisher(stompx.Config{Addr: broker}, 1)
	t.Cleanup(func() { pub.Close() })
	publish := func(t *testing.T) string {
		t.Helper()
		id := message.NewID()
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		body := fmt.Sprintf(`{"id":%q,"type":"order.placed","total":7}`, id)
		if err := pub.Publish(pctx, queue, []byte(body), map[string]string{"persistent": "true"}); err != nil {
			t.Fatalf("publishing: %v", err)
		}
		return id
	}
	processed := func(t *testing.T, id string) {
		t.Helper()
		testenv.Eventually(t, 30*time.Second, "order "+id+" PROCESSED with its effect", func() bool {
			var status string
			var total int
			err := db.Pool.QueryRow(ctx, `SELECT s.status, o.total FROM journal_state s JOIN orders o ON o.id = s.id WHERE s.id = $1`, id).Scan(&status, &total)
			return err == nil && status == "PROCESSED" && total == 7
		})
	}
	// run starts c.Run; stop cancels it and checks that Run returns nil within 30 s.
	run := func(t *testing.T, c *inboxd.Client) (stop func()) {
		t.Helper()
		s := testenv.Start(t, 30*time.Second, c.Run)
		return func() {
			if err := s(); err != nil {
				t.Errorf("Run after cancel = %v, want nil", err)
			}
		}
	}

	c, err := inboxd.New(db.Pool, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.Handle("order.placed", inboxd.HandlerFunc(func(context.Context, pgx.Tx, inboxd.Event) error { return errors.New("replaced") }))
	c.Handle("order.placed", handler) // replaces

	stop := run(t, c)
	processed(t, publish(t))
	// The API serves the journal, not the demo: no door publishes registrations into
	// the program's queue.
	if code := httpStatus(t, http.MethodPost, "http://"+cfg.HTTPAddr+"/registration", `{"name":"x"}`); code != http.StatusNotFound {
		t.Errorf("POST /registration on an embedded client: %d, want 404", code)
	}
	if code := httpStatus(t, http.MethodGet, "http://"+cfg.HTTPAddr+"/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz: %d, want 200", code)
	}
	// The first Run has processed an event, so it is running: a second one is refused.
	if err := c.Run(ctx); !errors.Is(err, inboxd.ErrRunning) {
		t.Fatalf("a second Run while the first runs: %v, want ErrRunning", err)
	}
	// The caller's registerer has inboxd's metrics, the ingest of that event counted.
	mfs, err := cfg.MetricsRegisterer.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var committed float64
	for _, mf := range mfs {
		if mf.GetName() == "inboxd_ingest_committed_total" {
			for _, m := range mf.GetMetric() {
				committed += m.GetCounter().GetValue()
			}
		}
	}
	if committed != 1 {
		t.Errorf("inboxd_ingest_committed_total in the caller's registry = %v, want 1", committed)
	}
	stop()
	if err := db.Pool.Ping(ctx); err != nil {
		t.Fatalf("the caller's pool after Run: %v", err)
	}

	// Published while nothing runs: the broker keeps it for the next Run.
	id := publish(t)
	stop = run(t, c)
	processed(t, id)
	stop()

	// A new client on the same database (and no registerer: one client per registerer).
	cfg.MetricsRegisterer = nil
	c2, err := inboxd.New(db.Pool, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c2.Handle("order.placed", handler)
	run(t, c2)
	processed(t, publish(t))
}

// The command line's serve is a Client: "serve -demo" through the command line's wiring
// (the program's handlers, the demo's routes and table) takes the tutorial's inline
// registration to a customer, and SIGTERM stops it gracefully with exit code 0.
func TestMainServesThroughClient(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	addr := testenv.FreeAddr(t)
	args := []string{"serve", "-demo", "-migrate", "auto", "-database-url", db.URL, "-stomp-addr", testenv.Broker(t),
		"-destination", testenv.Queue(t), "-http-addr", addr, "-webhook-addr", "", "-cert-dir", t.TempDir(),
		"-sweep-interval", "50ms", "-log-level", "warn"}
	stop := startMain(t, args, nil)
	base := "http://" + addr
	testenv.Eventually(t, 60*time.Second, "the API", func() bool {
		r, err := http.Get(base + "/registration/form")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
	inline := `{"name":"User","email":"user@email.com","jurisdiction":"mga","createdAt":"2023-01-12T09:21:04.571+00:00"}`
	if code := httpStatus(t, http.MethodPost, base+"/registration/", inline); code != http.StatusAccepted {
		t.Fatalf("POST /registration/: %d", code)
	}
	testenv.Eventually(t, 60*time.Second, "the customer", func() bool {
		var n int
		_ = db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM customers WHERE email = 'user@email.com'`).Scan(&n)
		return n == 1
	})
	stop()
}

// startMain runs the command line (cli.Main with args and the handlers handle sets) in the
// background. stop sends SIGTERM and expects exit code 0 within 60s; a test that ends
// without calling it stops the command the same way, unchecked.
func startMain(t *testing.T, args []string, handle func(*inboxd.Client)) (stop func()) {
	t.Helper()
	var stderr testenv.Buffer
	done := make(chan int, 1)
	go func() { done <- cli.Main(args, io.Discard, &stderr, cli.Options{Handle: handle}) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
			<-done
		}
	})
	return func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-done:
			stopped = true
			if code != 0 {
				t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", code, stderr.String())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("serve did not stop within 60s of SIGTERM; stderr:\n%s", stderr.String())
		}
	}
}
