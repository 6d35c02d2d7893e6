//go:build chaos

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// workload: unique registrations (each becomes one customer), byte-for-byte
// duplicates, and malformed bodies, shuffled.
type workload struct {
	bodies        [][]byte
	ids           map[string]bool
	quarantineIDs map[string]bool
}

func newWorkload(n int, dest string, seed uint64) workload {
	r := rand.New(rand.NewPCG(seed, seed^0x5bd1e995))
	w := workload{ids: map[string]bool{}, quarantineIDs: map[string]bool{}}
	nMal, nDup := n/100, n*3/10
	var unique [][]byte
	for i := range n - nMal - nDup {
		id := message.SeededID(r)
		email := fmt.Sprintf("c%d-%s@example.com", i, id[:8])
		b, _ := json.Marshal(map[string]string{"id": id, "type": "registration", "name": "Chaos " + id[:8], "email": email,
			"jurisdiction": "mga", "createdAt": "2026-11-22T10:00:00Z", "aggregateId": "mga:" + email})
		unique = append(unique, b)
		w.ids[id] = true
	}
	w.bodies = append(w.bodies, unique...)
	for range nDup {
		w.bodies = append(w.bodies, unique[r.IntN(len(unique))])
	}
	for i := range nMal {
		body := fmt.Appendf(nil, "not json %d %s", i, message.SeededID(r))
		w.quarantineIDs[message.QuarantineID(message.ReasonNotJSON, dest, body)] = true
		w.bodies = append(w.bodies, body)
	}
	r.Shuffle(len(w.bodies), func(i, j int) { w.bodies[i], w.bodies[j] = w.bodies[j], w.bodies[i] })
	return w
}

// instance is one inboxd serve process.
type instance struct {
	name, bin, logDir, httpAddr string
	env                         []string
	mu                          sync.Mutex
	cmd                         *exec.Cmd
	starts                      int
}

func (in *instance) start(t *testing.T) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.starts++
	logf, err := os.Create(filepath.Join(in.logDir, fmt.Sprintf("%s-%02d.log", in.name, in.starts)))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(in.bin, "serve")
	cmd.Env = append(os.Environ(), in.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", in.name, err)
	}
	logf.Close()
	in.cmd = cmd
}

func (in *instance) kill() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil {
		_ = in.cmd.Process.Kill() // SIGKILL
		_ = in.cmd.Wait()
		in.cmd = nil
	}
}

// stop sends SIGTERM and waits up to the shutdown timeout and a little.
func (in *instance) stop(t *testing.T, within time.Duration) time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd == nil {
		return 0
	}
	start := time.Now()
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- in.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s exited with %v after SIGTERM", in.name, err)
		}
	case <-time.After(within):
		t.Errorf("%s did not stop within %s of SIGTERM", in.name, within)
		_ = in.cmd.Process.Kill()
		<-done
	}
	in.cmd = nil
	return time.Since(start)
}

func (in *instance) ready() bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + in.httpAddr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// fault is one injected failure and how long the pipeline took to heal after it ended.
type fault struct {
	what                string
	at                  time.Duration // since the traffic started
	down                time.Duration
	ingestResumed       time.Duration // first new journal row after the fault ended
	processingResumed   time.Duration // first event processed after the fault ended
	ingestOK, processOK bool
}

func TestChaos(t *testing.T) {
	n := envInt("CHAOS_MESSAGES", 6000)
	kills := envInt("CHAOS_KILLS", 12)
	rate := envInt("CHAOS_RATE", 80) // messages per second

	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	work, err := os.MkdirTemp("", "inboxd-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(work, "inboxd")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "cmd", "inboxd")).CombinedOutput(); err != nil {
		t.Fatalf("building inboxd: %v\n%s", err, out)
	}
	t.Logf("logs in %s", work)

	broker := testenv.StartPrivateBroker(t)
	pg := testenv.StartPrivatePostgres(t)
	queue := "/queue/chaos." + testenv.Suffix()
	w := newWorkload(n, queue, 2026)

	instances := make([]*instance, 2)
	for i := range instances {
		in := &instance{name: fmt.Sprintf("inboxd-%c", 'a'+i), bin: bin, logDir: work, httpAddr: testenv.FreeAddr(t)}
		in.env = []string{
			"INBOXD_DEMO=true", "INBOXD_MIGRATE=auto", "INBOXD_DATABASE_URL=" + pg.URL, "INBOXD_STOMP_ADDR=" + broker.Addr, "INBOXD_DESTINATION=" + queue,
			"INBOXD_HTTP_ADDR=" + in.httpAddr, "INBOXD_WEBHOOK_ADDR=", "INBOXD_SHUTDOWN_TIMEOUT=10s",
			"INBOXD_CERT_DIR=" + filepath.Join(work, "certs"), "INBOXD_LOG_LEVEL=info",
		}
		instances[i] = in
		in.start(t)
		t.Cleanup(in.kill)
	}
	a, b := instances[0], instances[1]
	testenv.Eventually(t, 60*time.Second, "both instances ready", func() bool { return a.ready() && b.ready() })

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	// Traffic: every body in order at a steady rate; a failed send is retried (a
	// duplicate at worst, which the journal collapses).
	start := time.Now()
	var sent atomic.Int64
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		p := stompx.NewPublisher(stompx.Config{Addr: broker.Addr}, 2)
		defer p.Close()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for _, body := range w.bodies {
			<-tick.C
			for {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				err := p.Publish(pctx, queue, body, nil)
				pcancel()
				if err == nil || ctx.Err() != nil {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			sent.Add(1)
		}
	}()

	// recovery polls the journal until something happens after end.
	var faults []*fault
	var fmu sync.Mutex
	var measuring sync.WaitGroup
	measure := func(f *fault, end time.Time) {
		fmu.Lock()
		faults = append(faults, f)
		fmu.Unlock()
		measuring.Go(func() {
			deadline := end.Add(90 * time.Second)
			for time.Now().Before(deadline) && (!f.ingestOK || !f.processOK) {
				var lastIn, lastProc *time.Time
				qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
				err := pool.QueryRow(qctx, `SELECT (SELECT max(received_at) FROM journal), (SELECT max(processed_at) FROM journal_state)`).Scan(&lastIn, &lastProc)
				qcancel()
				if err == nil {
					if !f.ingestOK && lastIn != nil && lastIn.After(end) {
						f.ingestOK, f.ingestResumed = true, time.Since(end)
					}
					if !f.processOK && lastProc != nil && lastProc.After(end) {
						f.processOK, f.processingResumed = true, time.Since(end)
					}
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	at := func() time.Duration { return time.Since(start).Round(100 * time.Millisecond) }

	// Faults, one after the other, while the traffic runs: kill -9 of instance b every
	// few seconds (restarted a second later), with a broker restart, a database crash
	// restart and a 10 s database outage in between.
	var killRestarts []time.Duration
	kill := func() {
		b.kill()
		time.Sleep(time.Second)
		restarted := time.Now()
		b.start(t)
		measuring.Go(func() {
			for time.Since(restarted) < 60*time.Second {
				if b.ready() {
					fmu.Lock()
					killRestarts = append(killRestarts, time.Since(restarted))
					fmu.Unlock()
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	done := 0
	for i := 0; done < kills; i++ {
		time.Sleep(3 * time.Second)
		switch i {
		case 3:
			f := &fault{what: "broker restart (SIGKILL, start again)", at: at()}
			t0 := time.Now()
			broker.Kill()
			time.Sleep(2 * time.Second)
			broker.Start()
			f.down = time.Since(t0)
			measure(f, time.Now())
		case 7:
			f := &fault{what: "database crash restart (pg_ctl -m immediate, start)", at: at()}
			t0 := time.Now()
			pg.Restart()
			f.down = time.Since(t0)
			measure(f, time.Now())
		case 11:
			f := &fault{what: "database outage 10 s (down, then start)", at: at()}
			t0 := time.Now()
			pg.Outage(10 * time.Second)
			f.down = time.Since(t0)
			measure(f, time.Now())
		default:
			kill()
			done++
		}
	}
	<-pubDone
	published := time.Since(start)

	// Drain: everything journaled, quarantined and processed, exactly.
	var state string
	check := func() bool {
		var journal, distinct, pending, processed, quarantine, customers, dupEffects int
		err := pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM journal), (SELECT count(DISTINCT id) FROM journal),
			(SELECT count(*) FROM journal j LEFT JOIN journal_state s ON s.id = j.id WHERE s.status IS DISTINCT FROM 'PROCESSED'),
			(SELECT count(*) FROM journal_state WHERE status = 'PROCESSED'),
			(SELECT count(*) FROM quarantine), (SELECT count(*) FROM customers),
			(SELECT count(*) FROM (SELECT id FROM customers GROUP BY id HAVING count(*) > 1) AS d)`).
			Scan(&journal, &distinct, &pending, &processed, &quarantine, &customers, &dupEffects)
		if err != nil {
			state = err.Error()
			return false
		}
		state = fmt.Sprintf("journal=%d (distinct %d) of %d unique ids, not processed=%d, quarantine=%d of %d malformed, customers=%d, duplicate effects=%d",
			journal, distinct, len(w.ids), pending, quarantine, len(w.quarantineIDs), customers, dupEffects)
		return journal == len(w.ids) && distinct == journal && pending == 0 && processed == journal &&
			quarantine == len(w.quarantineIDs) && customers == len(w.ids) && dupEffects == 0
	}
	drainStart := time.Now()
	deadline := time.Now().Add(3 * time.Minute)
	for !check() {
		if time.Now().After(deadline) {
			t.Fatalf("not exact 3 minutes after the traffic ended: %s", state)
		}
		time.Sleep(250 * time.Millisecond)
	}
	drained := time.Since(drainStart)
	measuring.Wait()

	// Exactly the expected ids and quarantine rows, not just the counts.
	checkSet := func(table, sql string, want map[string]bool) {
		rows, err := pool.Query(ctx, sql)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			got[id] = true
		}
		rows.Close()
		for id := range want {
			if !got[id] {
				t.Errorf("%s lacks %s", table, id)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s holds %d ids, want %d", table, len(got), len(want))
		}
	}
	checkSet("journal", `SELECT id::TEXT FROM journal`, w.ids)
	checkSet("customers", `SELECT id::TEXT FROM customers`, w.ids)
	checkSet("quarantine", `SELECT id::TEXT FROM quarantine`, w.quarantineIDs)

	var p50, p95, p99, pmax float64
	var over15 int
	if err := pool.QueryRow(ctx, `SELECT
		percentile_cont(0.5) WITHIN GROUP (ORDER BY s), percentile_cont(0.95) WITHIN GROUP (ORDER BY s),
		percentile_cont(0.99) WITHIN GROUP (ORDER BY s), max(s), count(*) FILTER (WHERE s > 15)
		FROM (SELECT EXTRACT(EPOCH FROM st.processed_at - j.received_at)::FLOAT8 AS s FROM journal j JOIN journal_state st ON st.id = j.id) AS l`).
		Scan(&p50, &p95, &p99, &pmax, &over15); err != nil {
		t.Fatal(err)
	}

	// Stop both gracefully, then prove the queue is drained: a sentinel published now
	// must be the first message a fresh consumer gets.
	var stops []time.Duration
	for _, in := range instances {
		stops = append(stops, in.stop(t, 15*time.Second))
	}
	queueDrained := probeDrained(t, broker.Addr, queue)
	// Every fault here is transient: each part logs it once at WARN and its end at
	// INFO; ERROR is for what needs a person (issue 27: the outbox retention pass logged
	// ERROR while the database was down).
	errorLines := errorLogLines(t, work)
	for _, l := range errorLines {
		t.Errorf("ERROR logged for a transient fault: %s", l)
	}

	fmt.Printf("\n=== chaos: %d messages (%d unique, %d duplicates, %d malformed) at %d msg/s over %s, two instances on %s\n",
		len(w.bodies), len(w.ids), len(w.bodies)-len(w.ids)-len(w.quarantineIDs), len(w.quarantineIDs), rate, published.Round(time.Second), queue)
	fmt.Printf("kill -9 of %s: %d (restarted 1 s later); ready again after: %s\n", b.name, kills, durations(killRestarts))
	for _, f := range faults {
		fmt.Printf("%-55s at %6s down %6s  ingest resumed %s  processing resumed %s\n", f.what, f.at, f.down.Round(100*time.Millisecond),
			okDur(f.ingestOK, f.ingestResumed), okDur(f.processOK, f.processingResumed))
	}
	fmt.Printf("invariants: %s; queue drained: %v; exact %s after the traffic ended\n", state, queueDrained, drained.Round(100*time.Millisecond))
	fmt.Printf("journaled -> PROCESSED latency: p50 %.2fs  p95 %.2fs  p99 %.2fs  max %.2fs  (%d events over 15 s)\n", p50, p95, p99, pmax, over15)
	fmt.Printf("graceful stops at the end took %s; ERROR lines in the logs: %d\n\n", durations(stops), len(errorLines))
	if !queueDrained {
		t.Error("queue not drained")
	}
	if os.Getenv("CHAOS_STRICT_P99") != "" && p99 > 15 {
		t.Errorf("p99 %.2fs over 15 s", p99)
	}
}

// errorLogLines returns the ERROR lines of the instances' logs in dir.
func errorLogLines(t *testing.T, dir string) []string {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, name := range logs {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "level=ERROR") {
				out = append(out, filepath.Base(name)+": "+line)
			}
		}
	}
	return out
}

func okDur(ok bool, d time.Duration) string {
	if !ok {
		return "never (90 s)"
	}
	return d.Round(10 * time.Millisecond).String()
}

func durations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(100*time.Millisecond).String())
	}
	return "[" + strings.Join(s, " ") + "]"
}

func probeDrained(t *testing.T, addr, dest string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p := stompx.NewPublisher(stompx.Config{Addr: addr}, 1)
	sentinel := []byte("sentinel " + testenv.Suffix())
	err := p.Publish(ctx, dest, sentinel, nil)
	p.Close()
	if err != nil {
		t.Errorf("publishing the sentinel: %v", err)
		return false
	}
	conn, err := stompx.DialConn(ctx, stompx.Config{Addr: addr})
	if err != nil {
		t.Errorf("probing: %v", err)
		return false
	}
	defer conn.Close()
	sub, err := conn.Subscribe(dest, stomp.AckAuto)
	if err != nil {
		t.Errorf("probing: %v", err)
		return false
	}
	defer sub.Unsubscribe()
	select {
	case m := <-sub.C:
		if m.Err != nil || string(m.Body) != string(sentinel) {
			t.Errorf("first message on %s is %.80q, not the sentinel", dest, m.Body)
			return false
		}
		return true
	case <-ctx.Done():
		t.Error("no message within 30 s while probing")
		return false
	}
}
