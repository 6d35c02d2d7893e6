package notifier_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/notifier"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Every Run stopped in a test leaves no goroutine behind.
func TestMain(m *testing.M) { testenv.Main(m) }

// recorder collects what a Handler receives.
type recorder struct {
	mu       sync.Mutex
	payloads []string
	resumed  int
}

func (r *recorder) handle(n notifier.Notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n.Resumed {
		r.resumed++
		return
	}
	r.payloads = append(r.payloads, n.Payload)
}

func (r *recorder) got() (payloads []string, resumed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.payloads), r.resumed
}

func (r *recorder) has(payload string) func() bool {
	return func() bool {
		p, _ := r.got()
		return slices.Contains(p, payload)
	}
}

func (r *recorder) resumedAtLeast(n int) func() bool {
	return func() bool {
		_, got := r.got()
		return got >= n
	}
}

// setup is a test database and a notifier on it whose connection is named app, so that
// the test can find it in pg_stat_activity.
func setup(t *testing.T, log *slog.Logger) (*testenv.DB, *notifier.Notifier, string) {
	t.Helper()
	db := testenv.NewDB(t)
	cc, err := pgx.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	app := "notifier_test_" + testenv.Suffix()
	cc.RuntimeParams["application_name"] = app
	return db, notifier.New(cc, log), app
}

func notify(t *testing.T, db *testenv.DB, topic, payload string) {
	t.Helper()
	if _, err := db.Pool.Exec(context.Background(), `SELECT pg_notify($1, $2)`, topic, payload); err != nil {
		t.Fatal(err)
	}
}

// backends counts the notifier's connections.
func backends(t *testing.T, db *testenv.DB, app string) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Several topics, some subscribed before Run and one while it runs, share one
// connection; each handler hears its own topic only, and Resumed once it is listened to.
func TestTopicsShareOneConnection(t *testing.T) {
	db, n, app := setup(t, nil)
	var a, b, c recorder
	n.Listen("topic_a", a.handle)
	n.Listen("Topic-B", b.handle) // quoted as an identifier: case and dash kept
	stop := testenv.Start(t, 5*time.Second, n.Run)
	testenv.Eventually(t, 10*time.Second, "a and b listened to", func() bool { return a.resumedAtLeast(1)() && b.resumedAtLeast(1)() })
	c2 := n.Listen("topic_c", c.handle)
	testenv.Eventually(t, 10*time.Second, "c listened to while running", c.resumedAtLeast(1))

	for i := range 3 {
		notify(t, db, "topic_a", fmt.Sprint("a", i))
		notify(t, db, "Topic-B", fmt.Sprint("b", i))
		notify(t, db, "topic_c", fmt.Sprint("c", i))
	}
	testenv.Eventually(t, 10*time.Second, "every notification", func() bool { return a.has("a2")() && b.has("b2")() && c.has("c2")() })
	for name, r := range map[string]*recorder{"a": &a, "b": &b, "c": &c} {
		p, resumed := r.got()
		want := []string{name + "0", name + "1", name + "2"}
		if !slices.Equal(p, want) || resumed != 1 {
			t.Errorf("topic %s: got %v and %d Resumed, want %v and 1", name, p, resumed, want)
		}
	}
	if got := backends(t, db, app); got != 1 {
		t.Errorf("%d connections for 3 topics, want 1", got)
	}

	// Unlisten: c hears nothing more, and the others go on.
	c2.Unlisten()
	c2.Unlisten() // twice is harmless
	notify(t, db, "topic_c", "c-after")
	notify(t, db, "topic_a", "a-after")
	testenv.Eventually(t, 10*time.Second, "a after c unlistened", a.has("a-after"))
	if c.has("c-after")() {
		t.Error("an unlistened subscription got a notification")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The server ends the backend a moment after the client's goodbye.
	testenv.Eventually(t, 30*time.Second, "no connection once Run returned", func() bool { return backends(t, db, app) == 0 })
}

// A connection killed by the server, and refused while the database is closed, is an
// outage: logged once at WARN, with one line at its end, whatever the number of tries.
// Every subscriber hears Resumed on the new connection (its catch-up signal), and
// notifications flow again.
func TestReconnectAfterOutage(t *testing.T) {
	var logs testenv.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, n, app := setup(t, log)
	var a, b recorder
	n.Listen("topic_a", a.handle)
	n.Listen("topic_b", b.handle)
	testenv.Start(t, 5*time.Second, n.Run)
	testenv.Eventually(t, 10*time.Second, "listening", func() bool { return a.resumedAtLeast(1)() && b.resumedAtLeast(1)() })

	ctx := context.Background()
	var name string
	if err := db.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	// A database cannot close itself to connections: the admin database does it.
	admin, err := pgx.Connect(ctx, testenv.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec(ctx, `ALTER DATABASE `+name+` ALLOW_CONNECTIONS true`)
		_ = admin.Close(ctx)
	})
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := admin.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS false`)
	exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, app)
	testenv.Eventually(t, 20*time.Second, "several failed reconnects", func() bool {
		return strings.Count(logs.String(), "attempt=") >= 3 // the debug lines after the first
	})
	notify(t, db, "topic_a", "lost") // nobody listens: only Resumed tells of it
	exec(`ALTER DATABASE ` + name + ` ALLOW_CONNECTIONS true`)
	testenv.Eventually(t, 10*time.Second, "Resumed on the new connection", func() bool { return a.resumedAtLeast(2)() && b.resumedAtLeast(2)() })

	notify(t, db, "topic_a", "after")
	notify(t, db, "topic_b", "after")
	testenv.Eventually(t, 10*time.Second, "notifications after the outage", func() bool { return a.has("after")() && b.has("after")() })
	if a.has("lost")() {
		t.Error("a notification sent while nobody listened arrived") // PostgreSQL drops it: the premise of Resumed
	}
	if got := backends(t, db, app); got != 1 {
		t.Errorf("%d connections after the reconnect, want 1", got)
	}
	out := logs.String()
	if c := strings.Count(out, "level=WARN"); c != 1 {
		t.Errorf("%d WARN lines for one outage, want 1:\n%s", c, out)
	}
	if c := strings.Count(out, "LISTEN connection works again"); c != 1 {
		t.Errorf("%d lines for the outage's end, want 1:\n%s", c, out)
	}
}

// Run returns soon after its context ends, whether it waits for notifications or for
// its next try at a database that refuses it; either way no goroutine stays (TestMain).
func TestBoundedShutdown(t *testing.T) {
	t.Run("listening", func(t *testing.T) {
		_, n, _ := setup(t, nil)
		var a recorder
		n.Listen("topic_a", a.handle)
		stop := testenv.Start(t, 2*time.Second, n.Run)
		testenv.Eventually(t, 10*time.Second, "listening", a.resumedAtLeast(1))
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("stopped in %s", time.Since(start))
	})
	t.Run("reconnecting", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there: every connect is refused
		cc, err := pgx.ParseConfig("postgres://postgres@" + addr + "/none?connect_timeout=5")
		if err != nil {
			t.Fatal(err)
		}
		var logs testenv.Buffer
		n := notifier.New(cc, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		n.Listen("topic_a", func(notifier.Notification) {})
		stop := testenv.Start(t, 2*time.Second, n.Run)
		testenv.Eventually(t, 10*time.Second, "a failed connect", func() bool { return strings.Contains(logs.String(), "LISTEN connection failed") })
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// One Run at a time: a second one would open a second connection.
func TestRunTwice(t *testing.T) {
	_, n, _ := setup(t, nil)
	var a recorder
	n.Listen("topic_a", a.handle)
	testenv.Start(t, 5*time.Second, n.Run)
	testenv.Eventually(t, 10*time.Second, "listening", a.resumedAtLeast(1))
	if err := n.Run(context.Background()); err == nil {
		t.Fatal("a second Run while the first runs returned nil, want an error")
	}
}

// A quiet connection is pinged, its wait interrupted by a deadline: the connection stays
// usable, with no reconnect (one Resumed) and nothing lost.
func TestQuietConnectionPinged(t *testing.T) {
	notifier.SetPingAfter(t, 20*time.Millisecond)
	db, n, app := setup(t, nil)
	var a recorder
	n.Listen("topic_a", a.handle)
	testenv.Start(t, 5*time.Second, n.Run)
	testenv.Eventually(t, 10*time.Second, "listening", a.resumedAtLeast(1))
	testenv.Eventually(t, 10*time.Second, "a ping", func() bool {
		var q string
		err := db.Pool.QueryRow(context.Background(), `SELECT query FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&q)
		return err == nil && q == "-- ping"
	})
	for i := range 20 {
		notify(t, db, "topic_a", fmt.Sprint(i))
	}
	testenv.Eventually(t, 10*time.Second, "every notification", a.has("19"))
	if p, resumed := a.got(); len(p) != 20 || resumed != 1 {
		t.Errorf("got %d notifications and %d Resumed, want 20 and 1", len(p), resumed)
	}
}
