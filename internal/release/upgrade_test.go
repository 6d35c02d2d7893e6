package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

// repoRoot is the module's root: two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// buildEnv builds offline: the module cache only, never the network.
func buildEnv() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
}

// buildCurrent builds this tree's inboxd into dir.
func buildCurrent(root, dir string) (string, error) {
	bin := filepath.Join(dir, "inboxd-new")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/inboxd")
	cmd.Dir, cmd.Env = root, buildEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the current tree: %v\n%s", err, out)
	}
	return bin, nil
}

// buildRelease builds rel's inboxd from the repository's own history, offline: git
// archive of its commit into a directory of its own, then go build there with the
// module cache only.
func buildRelease(root, dir string, rel Release) (string, error) {
	src := filepath.Join(dir, "src-"+rel.Version)
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	tarball := filepath.Join(dir, rel.Version+".tar")
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", "-o", tarball, rel.Commit)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s (%s): %v\n%s", rel.Commit, rel.Version, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("unpacking %s: %v\n%s", rel.Version, err, out)
	}
	bin := filepath.Join(dir, "inboxd-"+rel.Version)
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/inboxd")
	cmd.Dir, cmd.Env = src, buildEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s (%s) offline: %v\n%s", rel.Version, rel.Commit, err, out)
	}
	return bin, nil
}

// proc is one inboxd process of the test.
type proc struct {
	name   string
	cmd    *exec.Cmd
	http   string
	exited chan struct{} // closed once it exited, with err set
	err    error
}

// start runs bin serve with env, and waits until its /readyz answers 200.
func start(t *testing.T, name, bin string, env []string) *proc {
	t.Helper()
	addr := testenv.FreeAddr(t)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), append(env, "INBOXD_HTTP_ADDR="+addr, "INBOXD_WEBHOOK_ADDR=", "INBOXD_LOG_LEVEL=warn")...)
	logs := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, http: addr, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error when it exited already
		<-p.exited
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, logs.String())
		}
	})
	testenv.Eventually(t, 60*time.Second, name+" ready", func() bool {
		select {
		case <-p.exited:
			t.Fatalf("%s exited at start: %v\n%s", name, p.err, logs.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("stopping %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("%s exited with %v", p.name, p.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not stop within 60s of SIGTERM", p.name)
	}
}

// processed reads inboxd_process_outcomes_total{outcome="processed"} from p's /metrics.
func (p *proc) processed(t *testing.T) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.http + "/metrics")
	if err != nil {
		t.Fatalf("%s /metrics: %v", p.name, err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	var sum float64
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.HasPrefix(line, "inboxd_process_outcomes_total{") && strings.Contains(line, `outcome="processed"`) {
			var v float64
			if _, err := fmt.Sscanf(line[strings.LastIndexByte(line, ' ')+1:], "%g", &v); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// contractsBetween reports whether a migration numbered after last, up to upTo,
// contracts the schema.
func contractsBetween(last, upTo int) (bool, error) {
	ms, err := schema.Migrations()
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Version > last && m.Version <= upTo && m.Contracts {
			return true, nil
		}
	}
	return false, nil
}

// The rolling upgrade (issue 27, item 3): the previous release (RELEASES' last line,
// built from this repository's history, offline) serves with work pending; the new
// release migrates (a job, as the schema owner) and starts beside it, as a DML-only
// role; both process side by side; the old one stops; the new one finishes. Every
// registration becomes exactly one customer, no handler run commits twice, and each
// aggregate's events commit in journal order. A release that contracts the schema
// leaves the one before it refusing work instead (it fails closed); the new one takes
// over. It runs from the last release to this tree, and from the release before the
// last to the last.
func TestRollingUpgradeFromPreviousRelease(t *testing.T) {
	root := repoRoot(t)
	f, err := os.Open(filepath.Join(root, "RELEASES"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Parse(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to build the releases: %v", err)
	}
	last := rs[len(rs)-1]
	// The last release beside this tree, and the last release's own upgrade (beside the
	// release before it) once RELEASES lists it, so that a contracting release stays
	// tested after it is cut.
	t.Run(last.Version+" to this tree", func(t *testing.T) { testRollingUpgrade(t, root, last, nil) })
	if len(rs) > 2 {
		t.Run(rs[len(rs)-2].Version+" to "+last.Version, func(t *testing.T) { testRollingUpgrade(t, root, rs[len(rs)-2], &last) })
	}
}

// testRollingUpgrade runs the upgrade from prev to next (nil: this tree).
func testRollingUpgrade(t *testing.T, root string, prev Release, next *Release) {
	dir := t.TempDir()
	var oldBin, newBin string
	var oldErr, newErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); oldBin, oldErr = buildRelease(root, dir, prev) }()
	go func() {
		defer wg.Done()
		if next == nil {
			newBin, newErr = buildCurrent(root, dir)
		} else {
			newBin, newErr = buildRelease(root, dir, *next)
		}
	}()
	wg.Wait()
	if oldErr != nil || newErr != nil {
		t.Fatalf("building: %v %v", oldErr, newErr)
	}
	out, err := exec.Command(newBin, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "inboxd v") {
		t.Fatalf("inboxd version: %v %q", err, out)
	}
	t.Logf("previous release %s (%s), new: %s", prev.Version, prev.Commit[:12], strings.TrimSpace(string(out)))
	upTo := math.MaxInt
	if next != nil {
		upTo = next.LastMigration
	}
	contracts, err := contractsBetween(prev.LastMigration, upTo)
	if err != nil {
		t.Fatal(err)
	}

	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	queue := testenv.Queue(t)
	common := []string{"INBOXD_STOMP_ADDR=" + testenv.Broker(t), "INBOXD_DESTINATION=" + queue, "INBOXD_DEMO=true",
		"INBOXD_CERT_DIR=" + filepath.Join(dir, "certs"), "INBOXD_SWEEP_INTERVAL=200ms", "INBOXD_SHUTDOWN_TIMEOUT=20s"}

	// The previous release is deployed as its README says: its own migrate job, then
	// serve, as the owner (v0.0.0's serve also migrated at start; v0.1.0's does not).
	oldMig := exec.Command(oldBin, "migrate")
	oldMig.Env = append(os.Environ(), "INBOXD_DATABASE_URL="+db.URL, "INBOXD_DEMO=true")
	if out, err := oldMig.CombinedOutput(); err != nil {
		t.Fatalf("%s's migrate: %v\n%s", prev.Version, err, out)
	}
	old := start(t, "old "+prev.Version, oldBin, append([]string{"INBOXD_DATABASE_URL=" + db.URL}, common...))

	// A witness of every committed handler run: a trigger on the demo's table, where
	// the handler's effect lands (ON CONFLICT DO NOTHING hides a second run from the
	// table itself; a BEFORE INSERT trigger sees it). Its sequence orders the runs. Each
	// run takes 5 ms more, so that work is still pending, and batches are open, while
	// the new release migrates.
	for _, stmt := range []string{
		`CREATE TABLE handler_runs (run_seq BIGSERIAL PRIMARY KEY, event_id UUID NOT NULL)`,
		`CREATE FUNCTION log_handler_run() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS
			'BEGIN INSERT INTO handler_runs (event_id) VALUES (NEW.id); PERFORM pg_sleep(0.005); RETURN NEW; END'`,
		`CREATE TRIGGER log_handler_run BEFORE INSERT ON customers FOR EACH ROW EXECUTE FUNCTION log_handler_run()`,
	} {
		if _, err := db.Pool.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}

	pub := stompx.NewPublisher(stompx.Config{Addr: testenv.Broker(t)}, 2)
	defer pub.Close()
	var ids []string
	publish := func(n int) {
		for range n {
			id := message.NewID()
			i := len(ids)
			ids = append(ids, id)
			agg := fmt.Sprintf("agg-%d", i%17)
			body, _ := json.Marshal(map[string]string{
				"id": id, "name": "Customer", "email": fmt.Sprintf("user%d@example.com", i), "jurisdiction": "mga",
				"createdAt": "2026-11-27T10:00:00Z", "aggregateId": agg,
			})
			// JMSXGroupID: with several instances on one queue, ActiveMQ then delivers an
			// aggregate to one of them at a time, in order (README, "Ordering").
			headers := map[string]string{"event-type": registration.EventType, "JMSXGroupID": agg}
			for range 1 + i%2 { // every other one twice: redelivery
				if err := pub.Publish(ctx, queue, body, headers); err != nil {
					t.Fatalf("publishing: %v", err)
				}
			}
		}
	}
	count := func(sql string, args ...any) int {
		var n int
		if err := db.Pool.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}

	// Work pending while the new release migrates, as a job with the owner's role.
	publish(600)
	mig := exec.Command(newBin, "migrate")
	mig.Env = append(os.Environ(), "INBOXD_DATABASE_URL="+db.URL, "INBOXD_DEMO=true")
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("new release's migrate: %v\n%s", err, out)
	}
	if err := schema.Check(ctx, db.Pool); err != nil {
		t.Fatalf("after the new release's migrate: %v", err)
	}
	// Where an event's status lives: the journal's own column until a release moved it
	// to journal_state.
	state := "journal"
	if count(`SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema()
		AND table_name = 'journal' AND column_name = 'status'`) == 0 {
		state = "journal_state"
	}
	pending := count(`SELECT count(*) FROM ` + state + ` WHERE status = 'RECEIVED'`)

	// The new release as a runtime role with only the grants it prints.
	role := "inboxd_up_" + testenv.Suffix()
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), testenv.AdminURL())
		if err == nil {
			_, _ = conn.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
			conn.Close(context.Background())
		}
	})
	grants, err := exec.Command(newBin, "migrate", "-print-grants", role, "-demo").Output()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, string(grants)); err != nil {
		t.Fatalf("applying the printed grants: %v", err)
	}
	roleURL, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	roleURL.User = url.User(role)
	newer := start(t, "new", newBin, append([]string{"INBOXD_DATABASE_URL=" + roleURL.String()}, common...))

	// Side by side. A release that contracted the schema (dropped what the previous one
	// reads) leaves the previous one refusing work: it must lose nothing and run nothing
	// twice, and the new one takes over.
	publish(600)
	if contracts {
		testenv.Eventually(t, 2*time.Minute, "the new release processing", func() bool { return newer.processed(t) > 0 })
	} else {
		testenv.Eventually(t, 2*time.Minute, "both releases processing", func() bool {
			return old.processed(t) > 0 && newer.processed(t) > 0
		})
	}
	old.stop(t)
	publish(300)

	testenv.Eventually(t, 3*time.Minute, "every registration journaled and processed", func() bool {
		return count(`SELECT count(*) FROM journal`) == len(ids) && count(`SELECT count(*) FROM `+state+` WHERE status = 'PROCESSED'`) == len(ids)
	})
	newer.stop(t)
	t.Logf("%d registrations (%d pending when the new release migrated), published %d times in all", len(ids), pending, len(ids)+len(ids)/2)

	if n := count(`SELECT count(*) FROM customers`); n != len(ids) {
		t.Errorf("customers = %d, want %d (one per registration)", n, len(ids))
	}
	if n := count(`SELECT count(*) FROM handler_runs`); n != len(ids) {
		t.Errorf("committed handler runs = %d, want %d (each registration exactly once)", n, len(ids))
	}
	if n := count(`SELECT count(*) FROM (SELECT event_id FROM handler_runs GROUP BY event_id HAVING count(*) > 1) d`); n != 0 {
		t.Errorf("%d registrations processed more than once", n)
	}
	// Aggregate order: within an aggregate, handler runs follow the journal's order.
	if n := count(`SELECT count(*) FROM (
		SELECT j.aggregate_id, r.run_seq, lag(r.run_seq) OVER (PARTITION BY j.aggregate_id ORDER BY j.sequence_no) AS prev_run
		FROM journal j JOIN handler_runs r ON r.event_id = j.id) o WHERE o.run_seq < o.prev_run`); n != 0 {
		t.Errorf("%d events ran before an earlier event of their aggregate", n)
	}
}
