package inboxd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/inboxd/inboxd/internal/cli"
	"github.com/inboxd/inboxd/internal/config"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// libraryOnly are the settings a library caller gives another way: secrets as values
// rather than files, a *slog.Logger rather than a format and level, a pool rather than
// a URL. StompTLSConfig is what Validate loads from the Stomp* files.
var libraryOnly = map[string]bool{
	"DatabaseURL": true, "DatabasePasswordFile": true, "DatabasePassword": true, "StompPasscodeFile": true,
	"AdminTokenFile": true, "WebhookTokenFile": true, "StompTLSConfig": true, "LogFormat": true, "LogLevel": true,
	"Demo": true,
}

// Every setting of the command line is a field of Config, of the same type, so that
// resolve can fill it: adding a flag without its library field fails here.
func TestConfigCoversEverySetting(t *testing.T) {
	lib := reflect.TypeFor[Config]()
	cli := reflect.TypeFor[config.Config]()
	for f := range cli.Fields() {
		if !f.IsExported() || libraryOnly[f.Name] {
			continue
		}
		lf, ok := lib.FieldByName(f.Name)
		if !ok {
			t.Errorf("inboxd.Config has no field %s (%s): the command line's setting is out of the library's reach", f.Name, f.Type)
			continue
		}
		if lf.Type != f.Type {
			t.Errorf("inboxd.Config.%s is %s, the setting is %s", f.Name, lf.Type, f.Type)
		}
	}
	for f := range lib.Fields() {
		if _, ok := cli.FieldByName(f.Name); !ok && !notSettings[f.Name] {
			t.Errorf("inboxd.Config.%s is no setting and not in notSettings: resolve would panic", f.Name)
		}
	}
}

// Zero fields take the command line's defaults, from its one table; set fields win.
func TestResolveDefaults(t *testing.T) {
	exported := func(c *config.Config) map[string]any {
		out := map[string]any{}
		v := reflect.ValueOf(c).Elem()
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() && !libraryOnly[f.Name] {
				out[f.Name] = v.Field(i).Interface()
			}
		}
		return out
	}
	got, err := resolve(Config{})
	if err != nil {
		t.Fatalf("resolve(Config{}): %v", err)
	}
	if want := config.Defaults(); !reflect.DeepEqual(exported(got), exported(want)) {
		t.Errorf("resolve(Config{}) = %v\nwant the defaults %v", exported(got), exported(want))
	}

	tests := []struct {
		name  string
		cfg   Config
		check func(*config.Config) bool
	}{
		{"a set field wins", Config{Concurrency: 3, Destinations: []string{"/queue/orders"}},
			func(c *config.Config) bool { return c.Concurrency == 3 && c.Destinations[0] == "/queue/orders" }},
		{"negative retention keeps forever", Config{Retention: -1, QuarantineRetention: -1},
			func(c *config.Config) bool { return c.Retention == 0 && c.QuarantineRetention == 0 }},
		{"disable the API and the webhook", Config{DisableHTTP: true, DisableWebhook: true},
			func(c *config.Config) bool { return c.HTTPAddr == "" && c.WebhookAddr == "" }},
		{"negative immediate retries means none", Config{ImmediateRetries: -1},
			func(c *config.Config) bool { return c.ImmediateRetries == 0 }},
		{"zero immediate retries is the default", Config{},
			func(c *config.Config) bool { return c.ImmediateRetries == 2 && c.MaxAttempts == 40 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := resolve(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Errorf("resolve(%+v) = %+v", tt.cfg, c)
			}
		})
	}
}

// Bad settings get the command line's errors, from New.
func TestNewRefusesBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"ack mode", Config{AckMode: "auto"}, "ack-mode"},
		{"prefetch below batch", Config{BatchSize: 100, Prefetch: 50}, "prefetch"},
		{"topic without durable names is fine by default", Config{Destinations: []string{"/topic/x"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := resolve(tt.cfg)
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
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil pool) did not fail")
	}
}

// Register replaces a handler, as its doc says, instead of panicking.
func TestRegisterReplaces(t *testing.T) {
	typ := "test.replace." + testenv.Suffix()
	first := HandlerFunc(func(context.Context, pgx.Tx, Event) error { return errors.New("first") })
	second := HandlerFunc(func(context.Context, pgx.Tx, Event) error { return errors.New("second") })
	Register(typ, first)
	Register(typ, second)
	h, ok := handlers.Lookup(typ)
	if !ok {
		t.Fatal("not registered")
	}
	if err := h.Handle(context.Background(), nil, Event{}); err == nil || err.Error() != "second" {
		t.Fatalf("the handler is %v, want the second one", err)
	}
}

func quietLogger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
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
	db := testenv.NewDB(t)
	queue := testenv.Queue(t)
	broker := testenv.Broker(t)
	ctx := context.Background()
	if err := Migrate(ctx, db.Pool); err != nil { // again: idempotent
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id UUID PRIMARY KEY, total INT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	handler := HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id, total) SELECT $1, (($2::JSONB)->>'total')::INT ON CONFLICT (id) DO NOTHING`, ev.ID, string(ev.Payload))
		return err
	})
	cfg := Config{
		StompAddr: broker, Destinations: []string{queue}, Logger: quietLogger(),
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
			err := db.Pool.QueryRow(ctx, `SELECT j.status, o.total FROM journal j JOIN orders o ON o.id = j.id WHERE j.id = $1`, id).Scan(&status, &total)
			return err == nil && status == "PROCESSED" && total == 7
		})
	}
	// run starts c.Run; stop cancels it and checks that Run returns nil within 30 s.
	run := func(t *testing.T, c *Client) (stop func()) {
		t.Helper()
		s := testenv.Start(t, 30*time.Second, c.Run)
		return func() {
			if err := s(); err != nil {
				t.Errorf("Run after cancel = %v, want nil", err)
			}
		}
	}

	c, err := New(db.Pool, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.Handle("order.placed", HandlerFunc(func(context.Context, pgx.Tx, Event) error { return errors.New("replaced") }))
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
	if err := c.Run(ctx); !errors.Is(err, ErrRunning) {
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
	c2, err := New(db.Pool, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c2.Handle("order.placed", handler)
	run(t, c2)
	processed(t, publish(t))
}

// The command line's serve is a Client: "serve -demo" through Main's wiring (the
// handlers given to Register, the demo's routes and table) takes the tutorial's inline
// registration to a customer, and SIGTERM stops it gracefully with exit code 0.
func TestMainServesThroughClient(t *testing.T) {
	db := testenv.NewDB(t)
	addr := testenv.FreeAddr(t)
	args := []string{"serve", "-demo", "-database-url", db.URL, "-stomp-addr", testenv.Broker(t),
		"-destination", testenv.Queue(t), "-http-addr", addr, "-webhook-addr", "", "-cert-dir", t.TempDir(),
		"-sweep-interval", "50ms", "-log-level", "warn"}
	stop := startMain(t, args, process.NewRegistry())
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

// startMain runs the command line (cli.Main with args and the handlers of reg) in the
// background. stop sends SIGTERM and expects exit code 0 within 60s; a test that ends
// without calling it stops the command the same way, unchecked.
func startMain(t *testing.T, args []string, reg *process.Registry) (stop func()) {
	t.Helper()
	var stderr testenv.Buffer
	done := make(chan int, 1)
	go func() { done <- cli.Main(args, io.Discard, &stderr, cli.Options{Handlers: reg, Serve: serve}) }()
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
