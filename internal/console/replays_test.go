package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/api"
	"github.com/inboxd/inboxd/internal/api/apitest"
	"github.com/inboxd/inboxd/internal/console"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// replaysSite is the console mounted on the API, as inboxd serves them, over its own
// database with settled events: 3 PROCESSED "order.placed" of aggregate a, the first
// two of which a selection by id picks, so the tail rule adds the third; and one
// PROCESSED "order.paid" of aggregate b.
type replaysSite struct {
	srv *api.Server
	db  *testenv.DB
	ids []string // order.placed, in journal order
}

func newReplaysSite(t *testing.T) *replaysSite {
	t.Helper()
	db := testenv.NewDB(t)
	srv, err := api.New(api.Config{Pool: db.Pool, Publisher: &apitest.Publisher{}, Destination: "/queue/x", AdminToken: adminToken,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := console.Register(srv.Echo(), console.Config{}); err != nil {
		t.Fatal(err)
	}
	s := &replaysSite{srv: srv, db: db}
	var b journal.Batch
	for i, typ := range []string{"order.placed", "order.placed", "order.placed", "order.paid"} {
		id := message.NewID()
		agg := "a"
		if i == 3 {
			agg = "b"
		} else {
			s.ids = append(s.ids, id)
		}
		ev, err := message.Decode([]byte(fmt.Sprintf(`{"id":%q,"aggregateId":%q}`, id, agg)), func(string) string { return "" },
			message.Options{DefaultEventType: typ})
		if err != nil {
			t.Fatal(err)
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: "/queue/x"})
	}
	ctx := context.Background()
	if _, err := journal.Ingest(ctx, db.Pool, b); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE journal_state SET status = 'PROCESSED'`); err != nil {
		t.Fatal(err)
	}
	return s
}

var bearer = []string{"Authorization", "Bearer " + adminToken}

// do sends what the console's script sends: JSON with the token, from the same origin.
func (s *replaysSite) do(t *testing.T, method, path string, body any, headers ...string) apitest.Response {
	t.Helper()
	return apitest.Do(t, s.srv, method, path, body, append(append([]string{}, bearer...), headers...)...)
}

func (s *replaysSite) plan(t *testing.T, sel map[string]any) journal.ReplayRun {
	t.Helper()
	r := s.do(t, http.MethodPost, "/admin/replays", sel)
	var run journal.ReplayRun
	if r.Code != http.StatusCreated {
		t.Fatalf("plan %v: %d %s", sel, r.Code, r.Body)
	}
	r.JSON(t, &run)
	return run
}

func (s *replaysSite) run(t *testing.T, r apitest.Response) journal.ReplayRun {
	t.Helper()
	var run journal.ReplayRun
	if r.Code != http.StatusOK {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	r.JSON(t, &run)
	return run
}

// errorOf returns a refusal's code and message, as the page shows them.
func errorOf(t *testing.T, r apitest.Response) (int, string) {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return r.Code, e.Error
}

// The Replays page and what its script does against the API: list runs, plan one and
// read its counts, start it, pause, resume and cancel it; bad input is refused with a
// message that says what to fix; and its actions are protected as every other console
// action is (admin token, POST with JSON only, same origin only). Each case has its own
// database.
func TestReplaysPage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		test func(t *testing.T, s *replaysSite)
	}{
		{"page in the nav of every page", func(t *testing.T, s *replaysSite) {
			for _, path := range []string{"/ui/", "/ui/failures", "/ui/replays", "/ui/replays?run=" + s.ids[0]} {
				r := apitest.Do(t, s.srv, http.MethodGet, path, nil)
				body := string(r.Body)
				if r.Code != http.StatusOK || !strings.Contains(body, `<a href="/ui/replays"`) {
					t.Errorf("%s: %d, nav link to /ui/replays: %v", path, r.Code, strings.Contains(body, `/ui/replays"`))
				}
			}
			body := string(apitest.Do(t, s.srv, http.MethodGet, "/ui/replays", nil).Body)
			for _, want := range []string{`data-page="replays"`, `<a href="/ui/replays" aria-current="page">Replays</a>`, `id="plan-form"`,
				`id="start-form"`, `name="reason"`, `name="rate"`, `name="publish"`, `id="run-pause"`, `id="run-resume"`, `id="run-cancel"`,
				`<option>running</option>`} {
				if !strings.Contains(body, want) {
					t.Errorf("the page lacks %s", want)
				}
			}
			// The page itself carries no data: runs come from the API, with the token.
			if r := apitest.Do(t, s.srv, http.MethodGet, "/admin/replays", nil); r.Code != http.StatusUnauthorized {
				t.Errorf("GET /admin/replays without a token: %d, want 401", r.Code)
			}
		}},
		{"listing", func(t *testing.T, s *replaysSite) {
			first := s.plan(t, map[string]any{"type": "order.paid"})
			second := s.plan(t, map[string]any{"ids": []string{s.ids[0]}})
			s.run(t, s.do(t, http.MethodPost, "/admin/replays/"+second.ID+"/start", map[string]any{"reason": "fix totals", "rate": 5, "publish": true}))
			var list struct{ Items []journal.ReplayRun }
			r := s.do(t, http.MethodGet, "/admin/replays?limit=50", nil)
			r.JSON(t, &list)
			if r.Code != http.StatusOK || len(list.Items) != 2 {
				t.Fatalf("list: %d %s", r.Code, r.Body)
			}
			got, older := list.Items[0], list.Items[1]
			if got.ID != second.ID || older.ID != first.ID {
				t.Errorf("list order %s, %s; want the newest first (%s, %s)", got.ID, older.ID, second.ID, first.ID)
			}
			if got.State != journal.RunRunning || got.Reason != "fix totals" || got.StartedBy != "admin" || got.Rate != 5 || !got.Publish ||
				got.Events != 3 || got.Pending != 3 || got.Done != 0 || !strings.Contains(string(got.Selection), s.ids[0]) {
				t.Errorf("listed run: %+v", got)
			}
			if older.State != journal.RunPlanned || older.Events != 1 || older.Pending != 1 {
				t.Errorf("listed plan: %+v", older)
			}
			list.Items = nil
			s.do(t, http.MethodGet, "/admin/replays?state=planned", nil).JSON(t, &list)
			if len(list.Items) != 1 || list.Items[0].ID != first.ID {
				t.Errorf("planned runs: %+v", list.Items)
			}
		}},
		{"plan shows its counts, then start", func(t *testing.T, s *replaysSite) {
			// By ids: the first two events of aggregate a; the tail rule adds the third.
			run := s.plan(t, map[string]any{"ids": []string{s.ids[0], s.ids[1]}, "statuses": []string{"PROCESSED"}})
			if run.State != journal.RunPlanned || run.Events != 3 || run.Selected != 2 || run.AddedByTail != 1 || run.Aggregates != 1 ||
				run.Types["order.placed"] != 3 {
				t.Fatalf("plan: %+v", run)
			}
			noTail := s.plan(t, map[string]any{"ids": []string{s.ids[0]}, "no_tail": true})
			if noTail.Events != 1 || noTail.AddedByTail != 0 {
				t.Errorf("plan without the tail rule: %+v", noTail)
			}
			got := s.run(t, s.do(t, http.MethodPost, "/admin/replays/"+run.ID+"/start", map[string]any{"reason": "fix totals", "rate": 2.5}))
			if got.State != journal.RunRunning || got.Reason != "fix totals" || got.Rate != 2.5 || got.Publish || got.StartedAt == nil {
				t.Errorf("started: %+v", got)
			}
			if r := s.do(t, http.MethodPost, "/admin/replays/"+run.ID+"/start", map[string]any{"reason": "again"}); r.Code != http.StatusConflict {
				t.Errorf("starting a run twice: %d %s", r.Code, r.Body)
			}
		}},
		{"pause, resume, cancel", func(t *testing.T, s *replaysSite) {
			run := s.plan(t, map[string]any{"type": "order.placed"})
			s.run(t, s.do(t, http.MethodPost, "/admin/replays/"+run.ID+"/start", map[string]any{"reason": "r"}))
			for _, step := range []struct{ action, want string }{
				{"pause", journal.RunPaused}, {"resume", journal.RunRunning}, {"pause", journal.RunPaused}, {"cancel", journal.RunCancelled},
			} {
				got := s.run(t, s.do(t, http.MethodPost, "/admin/replays/"+run.ID+"/"+step.action, map[string]any{}))
				if got.State != step.want {
					t.Fatalf("%s: state %s, want %s", step.action, got.State, step.want)
				}
			}
			if st := s.run(t, s.do(t, http.MethodGet, "/admin/replays/"+run.ID, nil)); st.FinishedAt == nil || st.Pending != 3 {
				t.Errorf("cancelled run: %+v", st)
			}
			var holds int
			if err := s.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM replay_hold`).Scan(&holds); err != nil || holds != 0 {
				t.Errorf("%d aggregates held after the cancel (%v), want 0", holds, err)
			}
			for _, action := range []string{"resume", "pause", "cancel"} {
				if code, msg := errorOf(t, s.do(t, http.MethodPost, "/admin/replays/"+run.ID+"/"+action, map[string]any{})); code != http.StatusConflict ||
					!strings.Contains(msg, "is cancelled") {
					t.Errorf("%s of a cancelled run: %d %q", action, code, msg)
				}
			}
		}},
		{"bad input is refused with a clear message", func(t *testing.T, s *replaysSite) {
			run := s.plan(t, map[string]any{"type": "order.placed"})
			start := "/admin/replays/" + run.ID + "/start"
			for _, c := range []struct {
				path string
				body any
				code int
				msg  string
			}{
				{start, map[string]any{"reason": "", "rate": 1}, 400, "start takes a reason"},
				{start, map[string]any{"reason": "   ", "rate": 1}, 400, "start takes a reason"},
				{start, map[string]any{"reason": "fix", "rate": -1}, 400, "a rate of at least 0"},
				{start, `{"reason":"fix","rate":"fast"}`, 400, "a rate of at least 0"},
				{"/admin/replays", map[string]any{"statuses": []string{"DEAD"}}, 400, "PROCESSED or REJECTED"},
				{"/admin/replays", map[string]any{"ids": []string{"not-an-id"}}, 400, "ids must be journal ids"},
				{"/admin/replays", map[string]any{"since": "yesterday"}, 400, "invalid replay selection"},
				{"/admin/replays/" + run.ID + "/resume", map[string]any{}, 409, "is planned"},
				{"/admin/replays/" + run.ID + "/rewind", map[string]any{}, 404, "no such replay action"},
				{"/admin/replays/" + s.ids[0] + "/pause", map[string]any{}, 404, "no replay run with this id"},
			} {
				code, msg := errorOf(t, s.do(t, http.MethodPost, c.path, c.body))
				if code != c.code || !strings.Contains(msg, c.msg) {
					t.Errorf("POST %s %v: %d %q, want %d and %q", c.path, c.body, code, msg, c.code, c.msg)
				}
			}
			if st := s.run(t, s.do(t, http.MethodGet, "/admin/replays/"+run.ID, nil)); st.State != journal.RunPlanned {
				t.Errorf("after refused starts the run is %s, want planned", st.State)
			}
			if code, msg := errorOf(t, s.do(t, http.MethodGet, "/admin/replays?state=finished", nil)); code != 400 || !strings.Contains(msg, "unknown replay run state") {
				t.Errorf("list of an unknown state: %d %q", code, msg)
			}
		}},
		{"actions refused as other console actions are", func(t *testing.T, s *replaysSite) {
			run := s.plan(t, map[string]any{"type": "order.placed"})
			s.run(t, s.do(t, http.MethodPost, "/admin/replays/"+run.ID+"/start", map[string]any{"reason": "r"}))
			// The retry of an event is the console's other action on one item: each
			// refusal must be the same for both.
			for _, c := range []struct {
				name    string
				method  string
				body    any
				headers []string
				code    int
			}{
				{"GET", http.MethodGet, nil, bearer, http.StatusMethodNotAllowed},
				{"no token", http.MethodPost, map[string]any{}, nil, http.StatusUnauthorized},
				{"wrong token", http.MethodPost, map[string]any{}, []string{"Authorization", "Bearer nope"}, http.StatusUnauthorized},
				{"cross-site (CSRF)", http.MethodPost, map[string]any{}, append([]string{"Sec-Fetch-Site", "cross-site"}, bearer...), http.StatusForbidden},
				{"other origin (CSRF)", http.MethodPost, map[string]any{}, append([]string{"Origin", "https://evil.example"}, bearer...), http.StatusForbidden},
				{"form post, not JSON (CSRF)", http.MethodPost, nil, append([]string{"Content-Type", "application/x-www-form-urlencoded"}, bearer...), http.StatusUnsupportedMediaType},
			} {
				for _, path := range []string{"/admin/replays/" + run.ID + "/pause", "/admin/events/" + s.ids[0] + "/retry"} {
					if r := apitest.Do(t, s.srv, c.method, path, c.body, c.headers...); r.Code != c.code {
						t.Errorf("%s %s: %d, want %d", c.name, path, r.Code, c.code)
					}
				}
			}
			if st := s.run(t, s.do(t, http.MethodGet, "/admin/replays/"+run.ID, nil)); st.State != journal.RunRunning {
				t.Errorf("after refused pauses the run is %s, want running", st.State)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t, newReplaysSite(t))
		})
	}
}
