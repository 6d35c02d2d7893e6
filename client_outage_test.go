package inboxd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/testenv"
)

// logLine is one line of the captured JSON log.
type logLine struct {
	Time      time.Time `json:"time"`
	Level     string    `json:"level"`
	Msg       string    `json:"msg"`
	Component string    `json:"component"`
	What      string    `json:"outage"`
}

func readLog(t *testing.T, buf *testenv.Buffer) []logLine {
	t.Helper()
	var out []logLine
	sc := bufio.NewScanner(strings.NewReader(buf.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestDependencyOutagesAndFreezes runs inboxd with the database and the broker behind
// proxies, and takes each away twice: an outage that is seen (connections closed,
// refused) and a freeze (nothing forwarded, nothing closed: a blackholed path, a paused
// VM). Issue 27:
//   - every event is processed exactly once and the outbox drains, after each;
//   - /readyz answers 503 within 2 s of a freeze, and the pipeline catches up after it;
//   - a silent broker is noticed within two heart-beats;
//   - a stop while the database is frozen, a commit in flight, ends within
//     ShutdownTimeout + 2 s;
//   - the log holds no ERROR line, and for each outage at most one WARN per part and
//     message, and an INFO "works again" only once the part works.
func TestDependencyOutagesAndFreezes(t *testing.T) {
	const hb = time.Second
	db := testenv.NewDB(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	dbProxy := testenv.StartFreezeProxy(t, u.Host)
	brokerProxy := testenv.StartFreezeProxy(t, testenv.Broker(t))
	pool := db.OpenPool(t, func(c *pgxpool.Config) {
		host, port, _ := net.SplitHostPort(dbProxy.Addr)
		p, _ := strconv.Atoi(port)
		c.ConnConfig.Host, c.ConnConfig.Port = host, uint16(p)
		c.MaxConns = 20
	})
	// Cleanups run last first: the proxies forward again before the pool closes.
	t.Cleanup(func() { dbProxy.Thaw(); brokerProxy.Thaw() })
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	q, out := testenv.Queue(t), testenv.Queue(t)
	var logs testenv.Buffer
	cfg := inboxd.Config{
		StompAddr: brokerProxy.Addr, StompHeartBeat: hb, Destinations: []string{q},
		HTTPAddr: testenv.FreeAddr(t), BatchSize: 20, BatchLinger: 5 * time.Millisecond, Prefetch: 100,
		DefaultEventType: "evt", SweepInterval: 100 * time.Millisecond, OutboxPollInterval: 200 * time.Millisecond,
		ShutdownTimeout: 3 * time.Second, StallAfter: time.Second, DisableWebhook: true,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	c, err := inboxd.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Handle("evt", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		if _, err := tx.Exec(ctx, `INSERT INTO effects (id) VALUES ($1)`, ev.ID); err != nil {
			return err
		}
		_, err := inboxd.Emit(ctx, tx, inboxd.Outgoing{Destination: out, Body: fmt.Appendf(nil, `{"id":%q}`, ev.ID)})
		return err
	}))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()

	var published atomic.Int64
	publish := func(n int) {
		t.Helper()
		base := int(published.Add(int64(n))) - n
		publishN(t, testenv.Broker(t), q, base+n, "evt") // ids 0..base+n-1: the first base are duplicates
	}
	exact := func(what string) {
		t.Helper()
		want := published.Load()
		testenv.Eventually(t, 60*time.Second, what+": every event processed once and every outbox message sent", func() bool {
			var n, distinct, unsent int64
			err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM effects), (SELECT count(DISTINCT id) FROM effects),
				(SELECT count(*) FROM outbox WHERE sent_at IS NULL)`).Scan(&n, &distinct, &unsent)
			if err != nil || n > distinct {
				t.Fatalf("%s: %d effects of %d events (err %v)", what, n, distinct, err)
			}
			return n == want && unsent == 0
		})
	}
	ready := func() int {
		cl := http.Client{Timeout: 500 * time.Millisecond}
		resp, err := cl.Get("http://" + cfg.HTTPAddr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	notReadyWithin := func(what string, d time.Duration) {
		t.Helper()
		start := time.Now()
		for ready() == http.StatusOK {
			if time.Since(start) > d {
				t.Errorf("%s: /readyz still 200 %s after", what, d)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: /readyz not ready after %s", what, time.Since(start).Round(time.Millisecond))
	}
	testenv.Eventually(t, 30*time.Second, "ready", func() bool { return ready() == http.StatusOK })
	publish(20)
	exact("start")

	type window struct {
		what               string
		from, restored, to time.Time
		component          string // the part that must log the outage and its end, if it noticed
		recovered          string // its INFO
	}
	var windows []window
	outage := func(what string, p *testenv.FreezeProxy, freeze bool, component, recovered string) {
		t.Helper()
		from := time.Now()
		if freeze {
			p.Freeze()
			notReadyWithin(what, 2*time.Second)
		} else {
			p.Cut()
		}
		publish(20)
		time.Sleep(3 * time.Second) // the outage lasts 3 s (not a wait for an outcome)
		restored := time.Now()
		if freeze {
			p.Thaw()
		} else {
			p.Restore()
		}
		exact(what)
		testenv.Eventually(t, 30*time.Second, what+": ready again", func() bool { return ready() == http.StatusOK })
		windows = append(windows, window{what: what, from: from, restored: restored, to: time.Now(), component: component, recovered: recovered})
	}
	outage("database outage", dbProxy, false, "ingest", "journal writes succeed again")
	outage("broker outage", brokerProxy, false, "ingest", "subscribed again")
	outage("database freeze", dbProxy, true, "ingest", "journal writes succeed again")
	outage("broker freeze", brokerProxy, true, "ingest", "subscribed again")

	// A stop while the database is frozen, with a commit in flight.
	published.Add(20)
	publishN(t, testenv.Broker(t), q, int(published.Load()), "evt")
	dbProxy.Freeze()
	time.Sleep(200 * time.Millisecond) // ingest has a batch to commit (not a wait for an outcome)
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		took := time.Since(start)
		t.Logf("Run returned %v %s after the stop, the database frozen", err, took.Round(time.Millisecond))
		if took > cfg.ShutdownTimeout+2*time.Second {
			t.Errorf("the stop took %s, want within the shutdown timeout + 2 s (%s)", took, cfg.ShutdownTimeout+2*time.Second)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return within a minute of the stop")
	}

	lines := readLog(t, &logs)
	for _, l := range lines {
		if l.Level == "ERROR" {
			t.Errorf("ERROR logged: %s %q", l.Component, l.Msg)
		}
	}
	for _, w := range windows {
		warns := map[string]int{}
		recovered, noticed := 0, false
		failing := map[string]bool{} // component and outage of the WARNs so far
		for _, l := range lines {
			if l.Time.Before(w.from) || l.Time.After(w.to) {
				continue
			}
			switch {
			case l.Level == "WARN":
				warns[l.Component+" "+l.What+": "+l.Msg]++
				failing[l.Component+" "+l.What] = true
				// The part's own outage line, not the health monitor's "stuck".
				noticed = noticed || l.Component == w.component && l.What != ""
			case l.Level == "INFO" && l.Time.Before(w.restored) && failing[l.Component+" "+l.What]:
				t.Errorf("%s: %s logged %q while the outage lasted", w.what, l.Component, l.Msg)
			case l.Level == "INFO" && l.Component == w.component && l.Msg == w.recovered:
				recovered++
			}
		}
		t.Logf("%s: WARN %v", w.what, warns)
		for k, n := range warns {
			if n > 1 {
				t.Errorf("%s: %q logged %d times at WARN, want once per outage", w.what, k, n)
			}
		}
		if noticed && recovered != 1 || !noticed && recovered != 0 {
			t.Errorf("%s: %s %q logged %d times, want once", w.what, w.component, w.recovered, recovered)
		}
	}
	for _, l := range lines {
		if l.Level == "INFO" && strings.HasSuffix(l.Msg, "works again") {
			t.Logf("%s %s: %s", l.Time.Format("15:04:05.000"), l.Component, l.Msg)
		}
	}
}
