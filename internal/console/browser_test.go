package console_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

const adminToken = "console-test-token"

// flakyType is an event type whose handler fails while broken is set: with one attempt
// allowed, its events go DEAD, and succeed once retried after the "fix".
const flakyType = "payment"

var broken atomic.Bool

// refundType is an event type whose handler refuses an amount that is not a number: an
// event with a bad amount goes DEAD whatever is retried, until an operator edits its
// payload (edit and retry, issue 22 item 5).
const refundType = "refund"

// fixture is a running inboxd with a known journal, and a headless Chromium.
type fixture struct {
	base    string // http://127.0.0.1:port
	db      *testenv.DB
	browser context.Context
	shots   string // directory for screenshots, "" for none

	mgaID  string // a PROCESSED registration in jurisdiction mga
	deadID []string
	badID  string // a DEAD refund whose payload is wrong ("amount": "twelve")

	mu       sync.Mutex
	problems []string // script exceptions and console errors, CSP violations included
}

// TestConsoleInBrowser drives the console in a real headless Chromium against a running
// inboxd with the real ActiveMQ and PostgreSQL. One browser and one inboxd serve every
// step, in order: each step leaves the state the next one reads.
func TestConsoleInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	f := newFixture(t, chromium)

	step(t, "security headers", func(t *testing.T) {
		res, err := http.Get(f.base + "/ui/failures")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if got := res.Header.Get("Content-Security-Policy"); got != console.CSP {
			t.Errorf("CSP = %q, want %q", got, console.CSP)
		}
		for h, want := range map[string]string{"X-Frame-Options": "DENY", "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store"} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
	})

	step(t, "refused without token", func(t *testing.T) {
		for _, page := range []string{"/ui/failures", "/ui/quarantine"} {
			f.open(t, page)
			f.waitFor(t, `!document.getElementById('notice').hidden && document.getElementById('notice').textContent.includes('needs a token')`, "the sign-in notice on "+page)
			if n := f.count(t, `#groups tr, #q-table tbody tr`); n != 0 {
				t.Errorf("%s shows %d rows without a token", page, n)
			}
		}
		// The data the page would show is refused by the API itself, whatever the page does.
		res, err := http.Get(f.base + "/admin/quarantine")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET /admin/quarantine without a token: %d, want 401", res.StatusCode)
		}
		// A cross-site browser POST is refused even with no credentials involved.
		req, _ := http.NewRequest(http.MethodPost, f.base+"/admin/events/"+f.deadID[0]+"/retry", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		req.Header.Set("Sec-Fetch-Site", "cross-site")
		res, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site POST: %d, want 403", res.StatusCode)
		}
	})

	step(t, "sign in", func(t *testing.T) {
		f.open(t, "/ui/login?next=%2Fui%2F")
		f.run(t, "type a wrong token", chromedp.SendKeys("#token", "wrong"), chromedp.Click("#login button"))
		f.waitFor(t, `document.getElementById('login-result').textContent.includes('refused')`, "the wrong token refused")
		f.run(t, "type the token", chromedp.SetValue("#token", ""), chromedp.SendKeys("#token", adminToken), chromedp.Click("#login button"))
		f.waitFor(t, `location.pathname === '/ui/' && sessionStorage.getItem('inboxd.token') !== null`, "the overview after signing in")
	})

	step(t, "overview counts match the database", func(t *testing.T) {
		f.open(t, "/ui/")
		f.waitLoaded(t)
		for _, st := range []string{"RECEIVED", "PROCESSED", "FAILED", "DEAD", "REJECTED"} {
			want := f.sql(t, `SELECT count(*) FROM journal_state WHERE status = $1`, st)
			if got := f.number(t, "#count-"+st); got != want {
				t.Errorf("%s: page shows %d, database has %d", st, got, want)
			}
		}
		if got, want := f.number(t, "#total"), f.sql(t, `SELECT count(*) FROM journal`); got != want {
			t.Errorf("total: page %d, database %d", got, want)
		}
		if got, want := f.number(t, "#quarantine"), f.sql(t, `SELECT count(*) FROM quarantine`); got != want {
			t.Errorf("quarantine: page %d, database %d", got, want)
		}
		if got, want := f.number(t, `#by-type td[data-type="`+flakyType+`"][data-status="DEAD"]`), f.sql(t, `SELECT count(*) FROM journal j JOIN journal_state s ON s.id = j.id WHERE j.event_type = $1 AND s.status = 'DEAD'`, flakyType); got != want {
			t.Errorf("by type %s/DEAD: page %d, database %d", flakyType, got, want)
		}
		f.waitFor(t, `document.querySelectorAll('#chart polyline').length === 2`, "the rate chart")
		f.screenshot(t, "overview.png")
	})

	step(t, "overview shows the outbox", func(t *testing.T) {
		// The demo's customers each emitted customer-registered; once the relay has sent
		// them all, the counts hold still and can be compared.
		testenv.Eventually(t, 30*time.Second, "the outbox drained", func() bool {
			return f.sql(t, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`) == 0
		})
		f.open(t, "/ui/")
		f.waitLoaded(t)
		if got := f.number(t, "#outbox"); got != 0 {
			t.Errorf("outbox unsent: page %d, database 0", got)
		}
		if got, want := f.number(t, "#outbox-sent"), f.sql(t, `SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL`); got != want || want == 0 {
			t.Errorf("outbox sent: page %d, database %d (want it above 0)", got, want)
		}
	})

	step(t, "filter the journal and open a timeline", func(t *testing.T) {
		f.open(t, "/ui/journal?type=registration")
		f.waitLoaded(t)
		f.run(t, "filter", chromedp.Click(`input[name=status][value=PROCESSED]`),
			chromedp.SendKeys(`textarea[name=payload]`, "jurisdiction=mga"), chromedp.Click(`#journal-filter button[type=submit]`))
		f.waitFor(t, `document.getElementById('result-summary').textContent.startsWith('1 entries')`, "exactly one matching entry")
		var link string
		f.run(t, "read the row", chromedp.Text(`#entries tbody a.event-link`, &link))
		if strings.TrimSpace(link) != f.mgaID {
			t.Fatalf("filtered row is %q, want %s", link, f.mgaID)
		}
		f.run(t, "open it", chromedp.Click(`#entries tbody a.event-link`))
		f.waitFor(t, `location.pathname === '/ui/events/`+f.mgaID+`' && document.querySelectorAll('#timeline li').length >= 2`, "the event's timeline")
		var timeline, payload string
		f.run(t, "read the timeline", chromedp.Text(`#timeline`, &timeline), chromedp.Text(`#payload`, &payload))
		for _, want := range []string{"Received and journaled", "Processed"} {
			if !strings.Contains(timeline, want) {
				t.Errorf("timeline %q lacks %q", timeline, want)
			}
		}
		if !strings.Contains(payload, `"jurisdiction": "mga"`) {
			t.Errorf("payload %q", payload)
		}
	})

	step(t, "edit a DEAD event's payload and retry it", func(t *testing.T) {
		f.open(t, "/ui/events/"+f.badID)
		f.waitLoaded(t)
		f.waitFor(t, `document.getElementById('edit-payload') !== null && document.getElementById('edit-payload').value.includes('"twelve"')`, "the edit form with the current payload")
		// Refused: the id must not change; the entry stays DEAD.
		changed := `{"id":"` + message.NewID() + `","amount":"12.00"}`
		f.run(t, "edit the id", chromedp.SetValue(`#edit-payload`, changed, chromedp.ByQuery), chromedp.SendKeys(`#edit-by`, "alice", chromedp.ByQuery),
			chromedp.Click(`#edit-submit`, chromedp.ByQuery))
		f.waitFor(t, `document.getElementById('edit-result').textContent.startsWith('422')`, "the refusal")
		if got := f.status(t, f.badID); got != "DEAD" {
			t.Fatalf("a refused edit changed the status to %s", got)
		}
		fixed := `{"id":"` + f.badID + `","amount":"12.00"}`
		f.run(t, "fix the amount", chromedp.SetValue(`#edit-payload`, fixed, chromedp.ByQuery), chromedp.Click(`#edit-submit`, chromedp.ByQuery))
		f.waitFor(t, `document.querySelector('#event-status .badge').textContent === 'PROCESSED'`, "the edited event shown PROCESSED")
		if got := f.status(t, f.badID); got != "PROCESSED" {
			t.Errorf("database status %s", got)
		}
		// The original payload is in the history, with who edited it; the new one is the payload.
		f.waitFor(t, `document.querySelectorAll('#timeline li.edit').length === 1`, "the edit in the timeline")
		var timeline, original, payload string
		f.run(t, "read the history", chromedp.Text(`#timeline`, &timeline, chromedp.ByQuery),
			chromedp.Text(`#timeline li.edit pre.original-payload`, &original, chromedp.ByQuery), chromedp.Text(`#payload`, &payload, chromedp.ByQuery))
		if !strings.Contains(timeline, "Payload edited by alice") || !strings.Contains(timeline, "PROCESSED") {
			t.Errorf("timeline %q", timeline)
		}
		if !strings.Contains(original, `"amount": "twelve"`) || !strings.Contains(payload, `"amount": "12.00"`) {
			t.Errorf("original %q, payload %q", original, payload)
		}
		if n := f.sql(t, `SELECT count(*) FROM journal_attempt WHERE journal_id = $1 AND outcome = 'EDITED' AND edited_by = 'alice'
			AND original_payload->>'amount' = 'twelve'`, f.badID); n != 1 {
			t.Errorf("%d EDITED rows with the original in the history", n)
		}
		f.screenshot(t, "edit-and-retry.png")
	})

	step(t, "retry a DEAD event until PROCESSED", func(t *testing.T) {
		f.open(t, "/ui/failures")
		f.waitLoaded(t)
		f.waitFor(t, `document.querySelectorAll('#groups tbody tr').length === `+fmt.Sprint(len(f.deadID)), "the dead events, grouped")
		f.screenshot(t, "failures.png")
		broken.Store(false) // the operator fixed the cause
		// From the keyboard: focus the button, press Enter.
		f.run(t, "retry one", chromedp.Focus(`button.retry[data-id="`+f.deadID[0]+`"]`), chromedp.KeyEvent(kb.Enter))
		f.waitFor(t, `Array.from(document.querySelectorAll('#groups tr')).some(tr => tr.querySelector('button.retry[data-id="`+f.deadID[0]+`"]') && tr.textContent.includes('PROCESSED'))`, "the retried event shown PROCESSED")
		if got := f.status(t, f.deadID[0]); got != "PROCESSED" {
			t.Errorf("database status %s", got)
		}
	})

	step(t, "the retried event's page shows every attempt", func(t *testing.T) {
		f.open(t, "/ui/events/"+f.deadID[0])
		f.waitFor(t, `document.querySelectorAll('#timeline li.attempt').length === 2`, "two attempts in the timeline")
		var timeline string
		f.run(t, "read the timeline", chromedp.Text(`#timeline`, &timeline))
		for _, want := range []string{"Attempt 1: DEAD after", "Attempt 1: PROCESSED after"} {
			if !strings.Contains(timeline, want) {
				t.Errorf("timeline %q lacks %q", timeline, want)
			}
		}
	})

	step(t, "retry a filtered set after a dry run", func(t *testing.T) {
		f.open(t, "/ui/failures")
		f.waitLoaded(t)
		f.run(t, "filter", chromedp.SendKeys(`#bulk-form input[name=type]`, flakyType), chromedp.Click(`#bulk-count`))
		f.waitFor(t, `(document.getElementById('bulk-count-result') || {}).textContent?.startsWith('1 entry matches')`, "the dry-run count")
		if got := f.status(t, f.deadID[1]); got != "DEAD" {
			t.Fatalf("a dry run changed the status to %s", got)
		}
		f.run(t, "confirm", chromedp.Click(`#bulk-result button.primary`))
		f.waitFor(t, `(document.getElementById('bulk-done') || {}).textContent === 'Requeued 1 entry.'`, "the requeue")
		testenv.Eventually(t, 30*time.Second, "the second dead event processed", func() bool { return f.status(t, f.deadID[1]) == "PROCESSED" })
	})

	step(t, "inspect and re-inject a quarantined message", func(t *testing.T) {
		var qid string
		if err := f.db.Pool.QueryRow(context.Background(), `SELECT id::TEXT FROM quarantine WHERE body = $1`, []byte("not json at all")).Scan(&qid); err != nil {
			t.Fatal(err)
		}
		var before time.Time
		if err := f.db.Pool.QueryRow(context.Background(), `SELECT received_at FROM quarantine WHERE id = $1`, qid).Scan(&before); err != nil {
			t.Fatal(err)
		}
		f.open(t, "/ui/quarantine")
		f.waitLoaded(t)
		f.run(t, "inspect", chromedp.Click(`button.inspect[data-id="`+qid+`"]`))
		f.waitFor(t, `document.getElementById('q-hex').textContent.startsWith('00000000  6e 6f 74')`, "the hex view")
		var text string
		f.run(t, "read the text view", chromedp.Text(`#q-text`, &text))
		if !strings.Contains(text, "not json at all") {
			t.Errorf("text view %q", text)
		}
		f.run(t, "re-inject", chromedp.Click(`#q-reinject`))
		f.waitFor(t, `document.querySelector('#q-confirm .confirm') !== null`, "the confirmation")
		if n := f.sql(t, `SELECT count(*) FROM quarantine WHERE id = $1 AND reinjected_at IS NOT NULL`, qid); n != 0 {
			t.Fatal("re-injected before confirming")
		}
		// The confirmation takes the focus, so Enter confirms: no mouse needed.
		f.waitFor(t, `document.activeElement === document.querySelector('#q-confirm button.danger')`, "the focus on the confirm button")
		f.run(t, "confirm", chromedp.KeyEvent(kb.Enter))
		f.waitFor(t, `(document.getElementById('q-reinjected') || {}).textContent?.startsWith('Re-injected to ')`, "the re-injection")
		// The body went back to the broker, and, being still no JSON, came back to the same
		// quarantine row, which ingest then marks as quarantined again (newer received_at).
		testenv.Eventually(t, 30*time.Second, "the re-injected message back in the quarantine", func() bool {
			return f.sql(t, `SELECT count(*) FROM quarantine WHERE id = $1 AND reinjected_at IS NULL AND received_at > $2`, qid, before) == 1
		})
	})

	step(t, "plan, start, pause, resume and cancel a replay run", func(t *testing.T) {
		f.open(t, "/ui/replays")
		f.waitLoaded(t)
		f.run(t, "plan without a criterion", chromedp.Click(`#plan-submit`, chromedp.ByQuery))
		f.waitFor(t, `document.getElementById('plan-result').textContent.startsWith('Give at least one of')`, "the refusal of a plan of everything")
		want := f.sql(t, `SELECT count(*) FROM journal j JOIN journal_state s ON s.id = j.id WHERE j.event_type = $1 AND s.status = 'PROCESSED'`, registration.EventType)
		f.run(t, "plan the processed registrations", chromedp.SendKeys(`#plan-form input[name=type]`, registration.EventType, chromedp.ByQuery),
			chromedp.Click(`#plan-submit`, chromedp.ByQuery))
		f.waitFor(t, `(document.getElementById('plan-done') || {}).textContent?.startsWith('Planned `+fmt.Sprint(want)+` events (`+fmt.Sprint(want)+` selected, 0 added by the tail rule)')`, "the plan's counts")
		f.waitFor(t, `document.querySelectorAll('#runs tbody tr').length === 1`, "the plan in the list")
		if n := f.sql(t, `SELECT count(*) FROM replay_run WHERE state = 'planned' AND events = $1`, want); n != 1 {
			t.Fatalf("%d planned runs of %d events in the database, want 1", n, want)
		}
		f.run(t, "open the plan", chromedp.Click(`#plan-open`, chromedp.ByQuery))
		f.waitFor(t, `!document.getElementById('start-form').hidden && document.getElementById('run-events').textContent === '`+fmt.Sprint(want)+`'`, "the run's counts and the start form")
		f.run(t, "start without a reason", chromedp.Click(`#start-submit`, chromedp.ByQuery))
		f.waitFor(t, `document.getElementById('start-result').textContent.startsWith('Give a reason')`, "the refusal without a reason")
		f.run(t, "start with a bad rate", chromedp.SendKeys(`#start-form input[name=reason]`, "fixed the handler", chromedp.ByQuery),
			chromedp.SetValue(`#start-form input[name=rate]`, "fast", chromedp.ByQuery), chromedp.Click(`#start-submit`, chromedp.ByQuery))
		f.waitFor(t, `document.getElementById('start-result').textContent.startsWith('The rate is a number')`, "the refusal of the rate")
		if n := f.sql(t, `SELECT count(*) FROM replay_run WHERE state = 'planned'`); n != 1 {
			t.Fatal("a refused start changed the run")
		}
		// A slow rate (one event per 20 s), so that the run is still going while it is
		// paused, resumed and cancelled.
		f.run(t, "start", chromedp.SetValue(`#start-form input[name=rate]`, "0.05", chromedp.ByQuery), chromedp.Click(`#start-submit`, chromedp.ByQuery))
		f.waitFor(t, `document.getElementById('run-detail').dataset.state === 'running' && !document.getElementById('run-pause').hidden`, "the run running")
		if n := f.sql(t, `SELECT count(*) FROM replay_run WHERE state = 'running' AND reason = 'fixed the handler' AND started_by = 'admin'
			AND rate = 0.05 AND NOT publish`); n != 1 {
			t.Errorf("the started run is not recorded with its reason, role, rate and suppress")
		}
		f.screenshot(t, "replays.png")
		for _, c := range []struct{ button, state, next string }{
			{"#run-pause", "paused", "#run-resume"}, {"#run-resume", "running", "#run-pause"},
		} {
			f.run(t, c.button, chromedp.Click(c.button, chromedp.ByQuery))
			f.waitFor(t, `document.getElementById('run-detail').dataset.state === '`+c.state+`' && !document.querySelector('`+c.next+`').hidden`, "the run "+c.state)
			if n := f.sql(t, `SELECT count(*) FROM replay_run WHERE state = $1`, c.state); n != 1 {
				t.Errorf("database: no %s run", c.state)
			}
		}
		f.run(t, "cancel", chromedp.Click(`#run-cancel`, chromedp.ByQuery))
		f.waitFor(t, `document.querySelector('#run-result .confirm') !== null`, "the confirmation")
		f.run(t, "confirm", chromedp.Click(`#run-result button.danger`, chromedp.ByQuery))
		f.waitFor(t, `document.getElementById('run-detail').dataset.state === 'cancelled' && document.getElementById('run-cancel').hidden`, "the run cancelled")
		if n := f.sql(t, `SELECT count(*) FROM replay_run WHERE state = 'cancelled'`); n != 1 {
			t.Errorf("database: the run is not cancelled")
		}
		f.waitFor(t, `document.querySelector('#runs tbody tr .badge').textContent === 'cancelled'`, "the list showing it cancelled")
	})

	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, p := range f.problems {
			t.Errorf("browser reported: %s", p)
		}
	})

	step(t, "feed page explains PostgreSQL", func(t *testing.T) {
		f.open(t, "/ui/feed")
		f.waitLoaded(t)
		var text string
		f.run(t, "read", chromedp.Text(`main`, &text))
		f.waitFor(t, `document.getElementById('jobs-summary').textContent === 'PostgreSQL has no changefeed jobs.'`, "the jobs")
		if !strings.Contains(text, "sweeper drives processing") {
			t.Errorf("feed page: %q", text)
		}
	})
}

// step runs one step as a subtest; a failed step ends the test, as the later steps
// depend on its outcome.
func step(t *testing.T, name string, fn func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, fn) {
		t.FailNow()
	}
}

func newFixture(t *testing.T, chromium string) *fixture {
	t.Helper()
	f := &fixture{db: testenv.NewDB(t), shots: os.Getenv("INBOXD_SCREENSHOTS")}
	queue := testenv.Queue(t)
	addr := testenv.FreeAddr(t)
	f.base = "http://" + addr
	broken.Store(true)
	cfg := &inboxd.Config{
		StompAddr: testenv.Broker(t), Destinations: []string{queue},
		HTTPAddr: addr, AdminToken: adminToken, BatchSize: 100, BatchLinger: 5 * time.Millisecond, Prefetch: 500,
		AckMode: "client", DefaultEventType: registration.EventType, Concurrency: 4, MaxAttempts: 1, DisableWebhook: true,
		SweepInterval: 50 * time.Millisecond, ShutdownTimeout: 10 * time.Second, MaxBodyBytes: 1 << 16,
		CertDir: t.TempDir(), CertHosts: []string{"127.0.0.1"}, WebhookURL: "webhook-https://127.0.0.1/changefeed",
	}
	if err := registration.Migrate(context.Background(), f.db.Pool); err != nil {
		t.Fatal(err)
	}
	handlers := map[string]inboxd.Handler{}
	handlers[flakyType] = inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		if broken.Load() {
			return errors.New("payment gateway: connection refused")
		}
		return nil
	})
	handlers[refundType] = inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		var p struct {
			Amount string `json:"amount"`
		}
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		if _, err := strconv.ParseFloat(p.Amount, 64); err != nil {
			return fmt.Errorf("refund: amount %q is not a number", p.Amount)
		}
		return nil
	})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cfg.Logger = log
	c, err := inboxd.New(f.db.Pool, *cfg)
	if err != nil {
		t.Fatalf("starting inboxd: %v", err)
	}
	for typ, h := range handlers {
		c.Handle(typ, h)
	}
	withDemo := registration.Wire(c)
	testenv.Start(t, 2*time.Minute, func(ctx context.Context) error { return c.Run(withDemo(ctx)) }) // the end of the test stops it, and checks it returned nil

	// The journal: registrations in two jurisdictions, one of them rejected, two payments
	// that go DEAD, and two messages that are not events at all.
	var msgs []msg
	reg1 := func(id, email, jurisdiction string) []byte {
		b, _ := json.Marshal(map[string]string{"id": id, "name": "Customer " + id[:8], "email": email,
			"jurisdiction": jurisdiction, "createdAt": "2026-11-22T10:00:00Z"})
		return b
	}
	f.mgaID = message.NewID()
	msgs = append(msgs, msg{body: reg1(f.mgaID, "ana@example.com", "mga")})
	for i := range 4 {
		msgs = append(msgs, msg{body: reg1(message.NewID(), fmt.Sprintf("user%d@example.com", i), "ukgc")})
	}
	msgs = append(msgs, msg{body: reg1(message.NewID(), "not-an-email", "mga")}) // REJECTED
	for range 2 {
		id := message.NewID()
		f.deadID = append(f.deadID, id)
		msgs = append(msgs, msg{body: []byte(`{"id":"` + id + `","amount":"12.50"}`), headers: map[string]string{"event-type": flakyType}})
	}
	f.badID = message.NewID()
	msgs = append(msgs, msg{body: []byte(`{"id":"` + f.badID + `","amount":"twelve"}`), headers: map[string]string{"event-type": refundType}})
	msgs = append(msgs, msg{body: []byte("not json at all")}, msg{body: []byte{0x00, 0xff, 0x10, '{'}})
	publish(t, queue, msgs)
	testenv.Eventually(t, 60*time.Second, "the journal to settle", func() bool {
		// One statement, one snapshot: all 9 journaled and none pending.
		return f.sql(t, `SELECT count(*) FROM journal_state WHERE status NOT IN ('RECEIVED','FAILED')`) == 9 &&
			f.sql(t, `SELECT count(*) FROM quarantine`) == 2
	})
	if n := f.sql(t, `SELECT count(*) FROM journal_state WHERE status = 'DEAD'`); n != 3 {
		t.Fatalf("DEAD = %d, want 3", n)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.WindowSize(1280, 1000), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	// chromedp's protocol tables predate some events of Debian's newer Chromium; their
	// "could not unmarshal event" reports are noise, anything else is logged.
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "could not unmarshal event") {
			t.Logf("chromedp: %s", msg)
		}
	}))
	t.Cleanup(func() { bcancel(); acancel() })
	chromedp.ListenTarget(bctx, func(ev any) {
		var p string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			p = "exception: " + ev.ExceptionDetails.Error()
		case *cdplog.EventEntryAdded:
			// Network errors are the API's 401s the console is meant to get.
			if ev.Entry.Level == cdplog.LevelError && ev.Entry.Source != cdplog.SourceNetwork {
				p = string(ev.Entry.Source) + ": " + ev.Entry.Text
			}
		}
		if p != "" {
			f.mu.Lock()
			f.problems = append(f.problems, p)
			f.mu.Unlock()
		}
	})
	// Start the browser now, so that its start-up does not count against a step's deadline.
	if err := chromedp.Run(bctx, cdplog.Enable()); err != nil {
		t.Fatalf("starting chromium %s: %v", chromium, err)
	}
	f.browser = bctx
	return f
}

type msg struct {
	body    []byte
	headers map[string]string
}

func publish(t *testing.T, queue string, msgs []msg) {
	t.Helper()
	pub := stompx.NewPublisher(stompx.Config{Addr: testenv.Broker(t)}, 1)
	defer pub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, m := range msgs {
		if err := pub.Publish(ctx, queue, m.body, m.headers); err != nil {
			t.Fatalf("publishing: %v", err)
		}
	}
}

// run runs browser actions with a deadline.
func (f *fixture) run(t *testing.T, what string, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.browser, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v (page text: %s)", what, err, f.pageText())
	}
}

func (f *fixture) open(t *testing.T, path string) {
	t.Helper()
	f.run(t, "opening "+path, chromedp.Navigate(f.base+path))
}

// waitFor polls a JavaScript expression in the page until it is true.
func (f *fixture) waitFor(t *testing.T, expr, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.browser, 30*time.Second)
	defer cancel()
	for {
		err := chromedp.Run(ctx, chromedp.Poll(expr, nil, chromedp.WithPollingInterval(50*time.Millisecond)))
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("waiting for %s: %v (page text: %s)", what, err, f.pageText())
		}
		// The page navigated under the poll (a sign-in redirect): poll the new page.
		time.Sleep(50 * time.Millisecond)
	}
}

func (f *fixture) waitLoaded(t *testing.T) {
	t.Helper()
	f.waitFor(t, `document.body.dataset.loaded === 'true'`, "the page's data")
}

func (f *fixture) pageText() string {
	ctx, cancel := context.WithTimeout(f.browser, 5*time.Second)
	defer cancel()
	var s string
	_ = chromedp.Run(ctx, chromedp.Evaluate(`document.location.href + ' :: ' + document.body.innerText.slice(0, 1500)`, &s))
	return s
}

func (f *fixture) count(t *testing.T, sel string) int {
	t.Helper()
	var n int
	f.run(t, "counting "+sel, chromedp.Evaluate(`document.querySelectorAll(`+jsString(sel)+`).length`, &n))
	return n
}

// number reads an element's text as a number ("1,234" included).
func (f *fixture) number(t *testing.T, sel string) int {
	t.Helper()
	var s string
	f.run(t, "reading "+sel, chromedp.Text(sel, &s, chromedp.ByQuery))
	var n int
	if _, err := fmt.Sscan(strings.ReplaceAll(strings.TrimSpace(s), ",", ""), &n); err != nil {
		t.Fatalf("%s shows %q, not a number", sel, s)
	}
	return n
}

func (f *fixture) sql(t *testing.T, q string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.Pool.QueryRow(context.Background(), q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (f *fixture) status(t *testing.T, id string) string {
	t.Helper()
	var s string
	if err := f.db.Pool.QueryRow(context.Background(), `SELECT status FROM journal_state WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// screenshot saves the viewport as a PNG when INBOXD_SCREENSHOTS names a directory
// (make screenshots).
func (f *fixture) screenshot(t *testing.T, name string) {
	t.Helper()
	if f.shots == "" {
		return
	}
	var png []byte
	f.run(t, "screenshot "+name, chromedp.CaptureScreenshot(&png))
	if err := os.MkdirAll(f.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.shots, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", filepath.Join(f.shots, name))
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
