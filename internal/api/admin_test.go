package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	const token = "tok-3f9a"
	admin := []struct{ method, path string }{
		{"GET", "/admin/events"},
		{"POST", "/admin/events/retry"},
		{"POST", "/admin/events/" + message.NewID() + "/retry"},
		{"GET", "/admin/quarantine"},
		{"GET", "/admin/quarantine/" + message.NewID() + "/body"},
		{"POST", "/admin/quarantine/" + message.NewID() + "/reinject"},
		{"POST", "/admin/events/replay"},
	}
	tests := []struct {
		name       string
		configured string
		auth       string
		wantOK     bool
	}{
		{"no token configured", "", "", true},
		{"missing", token, "", false},
		{"wrong", token, "Bearer nope", false},
		{"prefix of token", token, "Bearer tok", false},
		{"token plus suffix", token, "Bearer " + token + "x", false},
		{"wrong scheme", token, "Basic " + token, false},
		{"no scheme", token, token, false},
		{"right", token, "Bearer " + token, true},
		{"scheme case-insensitive", token, "bearer " + token, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.AdminToken = tt.configured })
			for _, a := range admin {
				var hdr []string
				if tt.auth != "" {
					hdr = []string{"Authorization", tt.auth}
				}
				r := h.do(t, a.method, a.path, nil, hdr...)
				if !tt.wantOK {
					expectError(t, r, http.StatusUnauthorized)
					if r.Header.Get("WWW-Authenticate") == "" {
						t.Errorf("%s %s: 401 without WWW-Authenticate", a.method, a.path)
					}
				} else if r.Code == http.StatusUnauthorized {
					t.Errorf("%s %s: unexpected 401", a.method, a.path)
				}
			}
			// The admin token also opens the journal reads; once any token is set,
			// personal data needs one, even from localhost.
			var hdr []string
			if tt.auth != "" {
				hdr = []string{"Authorization", tt.auth}
			}
			if r := h.do(t, "GET", "/journal/stats", nil, hdr...); (r.Code == 200) != tt.wantOK {
				t.Errorf("/journal/stats: %d", r.Code)
			}
		})
	}
}

func TestAdminListEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration", map[string]any{"j": "mga"}, map[string]any{"j": "mga"}, map[string]any{"j": "x"}, map[string]any{"j": "mga"})
	setStatus(t, h.db.Pool, journal.StatusDead, ids[0])
	setStatus(t, h.db.Pool, journal.StatusFailed, ids[1])
	setStatus(t, h.db.Pool, journal.StatusRejected, ids[2])
	tests := []struct {
		query  string
		want   int
		status int
	}{
		{"", 3, 200},
		{"status=DEAD", 1, 200},
		{"status=DEAD,FAILED&j=mga", 2, 200},
		{"type=registration&j=x", 1, 200},
		{"type=payment", 0, 200},
		{"status=PROCESSED", 0, 400},
		{"status=RECEIVED", 0, 400},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := h.do(t, "GET", "/admin/events?"+tt.query, nil)
			if tt.status != 200 {
				expectError(t, r, tt.status)
				return
			}
			var p page[entry]
			r.JSON(t, &p)
			if r.Code != 200 || len(p.Items) != tt.want {
				t.Errorf("%d, %d items, want %d: %s", r.Code, len(p.Items), tt.want, r.Body)
			}
		})
	}
}

func TestAdminRetryOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration", map[string]any{}, map[string]any{}, map[string]any{})
	setStatus(t, h.db.Pool, journal.StatusDead, ids[0])
	setStatus(t, h.db.Pool, journal.StatusProcessed, ids[1])

	for i := 0; i < 2; i++ { // the second call is harmless
		r := h.do(t, "POST", "/admin/events/"+ids[0]+"/retry", nil)
		var res retryResponse
		r.JSON(t, &res)
		if r.Code != 200 || !res.Retried || res.Status != journal.StatusFailed {
			t.Fatalf("retry %d: %d %s", i, r.Code, r.Body)
		}
	}
	e, err := journal.Get(context.Background(), h.db.Pool, ids[0])
	if err != nil || e.Status != journal.StatusFailed || e.Attempts != 0 {
		t.Errorf("after retry: %+v %v", e, err)
	}
	expectError(t, h.do(t, "POST", "/admin/events/"+ids[1]+"/retry", nil), http.StatusConflict)
	r := h.do(t, "POST", "/admin/events/"+ids[2]+"/retry", nil)
	var res retryResponse
	r.JSON(t, &res)
	if r.Code != 200 || res.Retried || res.Status != journal.StatusReceived {
		t.Errorf("received entry: %d %s", r.Code, r.Body)
	}
	expectError(t, h.do(t, "POST", "/admin/events/"+message.NewID()+"/retry", nil), 404)
	expectError(t, h.do(t, "POST", "/admin/events/nope/retry", nil), 404) // an event id (Event.Key) nobody sent
	expectError(t, h.do(t, "POST", "/admin/events/"+strings.Repeat("k", 1025)+"/retry", nil), 400)
	if !strings.Contains(h.log.String(), `"action":"retry"`) {
		t.Error("retry not logged")
	}
}

// A DEAD entry parks its aggregate: the entry behind it shows what it waits behind, and
// an operator's skip, recorded with who and when, moves the aggregate on (issue 18, item 2).
func TestAdminSkipOne(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration",
		map[string]any{"aggregateId": "p-1"}, map[string]any{"aggregateId": "p-1"}, map[string]any{"aggregateId": "p-2"})
	setStatus(t, h.db.Pool, journal.StatusDead, ids[0])

	var behind entry
	h.do(t, "GET", "/journal/"+ids[1], nil).JSON(t, &behind)
	if behind.WaitingBehind == nil || *behind.WaitingBehind != ids[0] || behind.Links["waiting_behind"].Href != "/journal/"+ids[0] {
		t.Errorf("entry behind a DEAD head: waiting_behind = %v, links %v; want %s", behind.WaitingBehind, behind.Links, ids[0])
	}
	expectError(t, h.do(t, "POST", "/admin/events/"+ids[0]+"/skip", map[string]any{}), 400)
	expectError(t, h.do(t, "POST", "/admin/events/"+ids[0]+"/skip", map[string]any{"by": strings.Repeat("x", 201)}), 400)
	expectError(t, h.do(t, "POST", "/admin/events/"+ids[1]+"/skip", map[string]any{"by": "alice"}), http.StatusConflict)
	expectError(t, h.do(t, "POST", "/admin/events/"+message.NewID()+"/skip", map[string]any{"by": "alice"}), 404)

	for i, want := range []bool{true, false} { // the second call is harmless
		r := h.do(t, "POST", "/admin/events/"+ids[0]+"/skip", map[string]any{"by": "alice"})
		var res skipResponse
		r.JSON(t, &res)
		if r.Code != 200 || res.Skipped != want || res.Status != journal.StatusDead || res.SkippedBy == nil || *res.SkippedBy != "alice" || res.SkippedAt == nil {
			t.Fatalf("skip %d: %d %s", i, r.Code, r.Body)
		}
	}
	var dead, after entry
	h.do(t, "GET", "/journal/"+ids[0], nil).JSON(t, &dead)
	if dead.SkippedBy == nil || *dead.SkippedBy != "alice" || dead.SkippedAt == nil {
		t.Errorf("skipped entry: %+v", dead)
	}
	h.do(t, "GET", "/journal/"+ids[1], nil).JSON(t, &after)
	if after.WaitingBehind != nil {
		t.Errorf("after the skip, still waiting behind %s", *after.WaitingBehind)
	}
	if !strings.Contains(h.log.String(), `"action":"skip"`) || !strings.Contains(h.log.String(), `"by":"alice"`) {
		t.Error("skip not logged with who")
	}
}

func TestAdminRetryFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration",
		map[string]any{"jurisdiction": "mga"}, map[string]any{"jurisdiction": "mga"}, map[string]any{"jurisdiction": "ukgc"}, map[string]any{"jurisdiction": "mga"})
	setStatus(t, h.db.Pool, journal.StatusDead, ids[0], ids[2])
	setStatus(t, h.db.Pool, journal.StatusRejected, ids[1])
	setStatus(t, h.db.Pool, journal.StatusProcessed, ids[3])

	tests := []struct {
		name   string
		body   any
		status int
		count  int64
		dry    bool
	}{
		{"dry run dead mga", `{"status":"DEAD","payload":{"jurisdiction":"mga"},"dry_run":true}`, 200, 1, true},
		{"dead mga", `{"status":"DEAD","payload":{"jurisdiction":"mga"}}`, 200, 1, false},
		{"dead mga again: nothing left", `{"status":["DEAD"],"payload":{"jurisdiction":"mga"}}`, 200, 0, false},
		{"every failure of a type", `{"type":"registration"}`, 200, 3, false},
		{"empty body: every failure", ``, 200, 3, false},
		{"processed is not retryable", `{"status":"PROCESSED"}`, 400, 0, false},
		{"payload not an object", `{"payload":[1]}`, 400, 0, false},
		{"bad since", `{"since":"today"}`, 400, 0, false},
		{"unknown field", `{"stauts":"DEAD"}`, 400, 0, false},
		{"lone surrogate is normalised, not a 500", `{"payload":{"a":"\ud800"}}`, 200, 0, false},
		{"invalid UTF-8 is normalised, not a 500", "{\"payload\":{\"a\":\"\xff\"}}", 200, 0, false},
		{"NUL refused", `{"payload":{"a":"\u0000"}}`, 400, 0, false},
		{"type with NUL refused", `{"type":"a\u0000"}`, 400, 0, false},
		{"wrong type", `{"dry_run":"yes"}`, 400, 0, false},
		{"number the database cannot hold is a 400, not a 500", `{"payload":{"a":1e999999},"dry_run":true}`, 400, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do(t, "POST", "/admin/events/retry", tt.body)
			if tt.status != 200 {
				expectError(t, r, tt.status)
				return
			}
			var res bulkResponse
			r.JSON(t, &res)
			if r.Code != 200 || res.Count != tt.count || res.DryRun != tt.dry || res.Action != "retry" {
				t.Errorf("%d %s, want count %d", r.Code, r.Body, tt.count)
			}
		})
	}
	if e, _ := journal.Get(context.Background(), h.db.Pool, ids[3]); e.Status != journal.StatusProcessed {
		t.Errorf("retry touched a PROCESSED entry: %s", e.Status)
	}
}

func TestAdminReplayDryRunVsReal(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedEvents(t, h.db.Pool, "registration",
		map[string]any{"jurisdiction": "mga"}, map[string]any{"jurisdiction": "mga"}, map[string]any{"jurisdiction": "ukgc"})
	setStatus(t, h.db.Pool, journal.StatusProcessed, ids...)
	statuses := func() map[string]journal.Status {
		out := map[string]journal.Status{}
		for _, id := range ids {
			e, err := journal.Get(context.Background(), h.db.Pool, id)
			if err != nil {
				t.Fatal(err)
			}
			out[id] = e.Status
		}
		return out
	}

	expectError(t, h.do(t, "POST", "/admin/events/replay", `{}`), 400) // no filter: refused
	expectError(t, h.do(t, "POST", "/admin/events/replay", `{"dry_run":true}`), 400)

	r := h.do(t, "POST", "/admin/events/replay", `{"payload":{"jurisdiction":"mga"},"dry_run":true}`)
	var res bulkResponse
	r.JSON(t, &res)
	if r.Code != 200 || res.Count != 2 || !res.DryRun || res.Action != "replay" {
		t.Fatalf("dry run: %d %s", r.Code, r.Body)
	}
	for id, st := range statuses() {
		if st != journal.StatusProcessed {
			t.Errorf("dry run touched %s: %s", id, st)
		}
	}

	r = h.do(t, "POST", "/admin/events/replay", `{"payload":{"jurisdiction":"mga"},"status":"PROCESSED"}`)
	r.JSON(t, &res)
	if r.Code != 200 || res.Count != 2 || res.DryRun {
		t.Fatalf("replay: %d %s", r.Code, r.Body)
	}
	got := statuses()
	if got[ids[0]] != journal.StatusFailed || got[ids[1]] != journal.StatusFailed || got[ids[2]] != journal.StatusProcessed {
		t.Errorf("after replay: %v", got)
	}
	logs := h.log.String()
	if !strings.Contains(logs, `"action":"replay"`) || !strings.Contains(logs, `"dry_run":true`) || !strings.Contains(logs, `"count":2`) {
		t.Errorf("replay not logged with action, dry_run and count:\n%s", logs)
	}
}

// seedQuarantine stores bad messages and returns their ids.
func seedQuarantine(t *testing.T, h *harness, bodies ...[]byte) []string {
	t.Helper()
	var b journal.Batch
	var ids []string
	for _, body := range bodies {
		bad := journal.Bad{Reason: message.ReasonMissingID, Detail: "no id", Destination: "/queue/orig", MessageID: "m-1",
			Headers: map[string]string{"event-type": "registration", "message-id": "m-1", "cloudEvents_source": "/orders"}, Body: body}
		b.Bad = append(b.Bad, bad)
		ids = append(ids, message.QuarantineID(bad.Reason, bad.Destination, bad.Body))
	}
	if _, err := journal.Ingest(context.Background(), h.db.Pool, b); err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestAdminQuarantine(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	raw := []byte("{\"name\":\"no id\",\"bin\":\"\xff\"}")
	var bodies [][]byte
	bodies = append(bodies, raw)
	for i := 0; i < 6; i++ {
		bodies = append(bodies, []byte(fmt.Sprintf(`{"n":%d}`, i)))
	}
	ids := seedQuarantine(t, h, bodies...)

	// List without bodies, paginated.
	seen := map[string]quarantineItem{}
	cursor := ""
	for {
		path := "/admin/quarantine?limit=3&order=asc"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		r := h.do(t, "GET", path, nil)
		if r.Code != 200 {
			t.Fatalf("%d %s", r.Code, r.Body)
		}
		if strings.Contains(string(r.Body), `"body"`) {
			t.Errorf("listing includes bodies: %s", r.Body)
		}
		var p page[quarantineItem]
		r.JSON(t, &p)
		for _, it := range p.Items {
			if _, dup := seen[it.ID]; dup {
				t.Fatalf("duplicate %s", it.ID)
			}
			seen[it.ID] = it
		}
		if p.NextCursor == "" {
			break
		}
		cursor = p.NextCursor
	}
	if len(seen) != len(ids) {
		t.Fatalf("listed %d rows, want %d", len(seen), len(ids))
	}
	it := seen[ids[0]]
	if it.Reason != "missing_id" || it.Destination != "/queue/orig" || it.Size != int64(len(raw)) || it.ReinjectedAt != nil || it.Detail != "no id" {
		t.Errorf("item %+v", it)
	}
	expectError(t, h.do(t, "GET", "/admin/quarantine?bogus=1", nil), 400)
	if r := h.do(t, "GET", "/admin/quarantine?reason=not_json", nil); r.Code != 200 || strings.Contains(string(r.Body), ids[0]) {
		t.Errorf("reason filter: %d %s", r.Code, r.Body)
	}

	// Download: byte for byte.
	r := h.do(t, "GET", "/admin/quarantine/"+ids[0]+"/body", nil)
	if r.Code != 200 || string(r.Body) != string(raw) || r.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("body: %d %q %q", r.Code, r.Body, r.Header.Get("Content-Type"))
	}
	expectError(t, h.do(t, "GET", "/admin/quarantine/"+message.NewID()+"/body", nil), 404)
	expectError(t, h.do(t, "GET", "/admin/quarantine/zzz/body", nil), 400)

	// Reinject: broker down → 503 and nothing marked.
	h.pub.SetErr(errors.New("broker down"))
	expectError(t, h.do(t, "POST", "/admin/quarantine/"+ids[0]+"/reinject", nil), 503)
	h.pub.SetErr(nil)

	var res reinjectResponse
	r = h.do(t, "POST", "/admin/quarantine/"+ids[0]+"/reinject", nil)
	r.JSON(t, &res)
	if r.Code != 200 || res.Status != "reinjected" || res.Destination != "/queue/orig" || res.ReinjectedAt == nil {
		t.Fatalf("reinject: %d %s", r.Code, r.Body)
	}
	msgs := h.pub.Sent()
	if len(msgs) != 1 || string(msgs[0].Body) != string(raw) || msgs[0].Destination != "/queue/orig" ||
		msgs[0].Headers["event-type"] != "registration" || msgs[0].Headers[HeaderReinjectedFrom] != ids[0] || msgs[0].Headers["message-id"] != "" ||
		msgs[0].Headers["cloudEvents_source"] != "/orders" { // a binary CloudEvent keeps its attributes
		t.Fatalf("published %+v", msgs)
	}

	// Second call: a no-op.
	r = h.do(t, "POST", "/admin/quarantine/"+ids[0]+"/reinject", nil)
	r.JSON(t, &res)
	if r.Code != 200 || res.Status != "already_reinjected" || len(h.pub.Sent()) != 1 {
		t.Errorf("second reinject: %d %s (%d published)", r.Code, r.Body, len(h.pub.Sent()))
	}
	// Forced, to another destination.
	r = h.do(t, "POST", "/admin/quarantine/"+ids[0]+"/reinject", `{"destination":"/queue/fixed","force":true}`)
	r.JSON(t, &res)
	if r.Code != 200 || res.Status != "reinjected" || res.Destination != "/queue/fixed" || len(h.pub.Sent()) != 2 {
		t.Errorf("forced reinject: %d %s", r.Code, r.Body)
	}
	expectError(t, h.do(t, "POST", "/admin/quarantine/"+ids[1]+"/reinject", `{"destination":"elsewhere"}`), 400)
	expectError(t, h.do(t, "POST", "/admin/quarantine/"+message.NewID()+"/reinject", nil), 404)

	var st statsResponse
	h.do(t, "GET", "/journal/stats", nil).JSON(t, &st)
	if st.Quarantine.Total != int64(len(ids)) || st.Quarantine.NotReinjected != int64(len(ids)-1) {
		t.Errorf("quarantine stats %+v", st.Quarantine)
	}
	var logged int
	for _, line := range strings.Split(h.log.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["action"] == "reinject" && m["remote"] != nil {
			logged++
		}
	}
	if logged < 3 {
		t.Errorf("reinject actions logged %d times, want at least 3", logged)
	}
}

// Issue 18, item 6: re-inject checks its destination with Emit's rule. A comma is an
// ActiveMQ composite destination: one re-inject would copy quarantined (personal) data
// to every destination listed. Wildcards and names Emit refuses are refused too, with a
// 400 that says why, and nothing is published.
func TestReinjectDestinationRule(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ids := seedQuarantine(t, h, []byte(`{"no":"id"}`))
	for _, dest := range []string{
		"/queue/fixed,/queue/attacker",
		"/queue/fixed,/topic/everyone",
		"/topic/orders.>",
		"/queue/a*",
		"/queue/with space",
		"/queue/" + strings.Repeat("x", 201),
	} {
		r := h.do(t, "POST", "/admin/quarantine/"+ids[0]+"/reinject", `{"destination":`+strconv.Quote(dest)+`}`)
		expectError(t, r, 400)
		if !strings.Contains(string(r.Body), "must be /queue/") {
			t.Errorf("%q: the 400 does not say which destinations are valid: %s", dest, r.Body)
		}
	}
	if n := len(h.pub.Sent()); n != 0 {
		t.Fatalf("%d messages published to refused destinations", n)
	}
	r := h.do(t, "POST", "/admin/quarantine/"+ids[0]+"/reinject", `{"destination":"/queue/fixed"}`)
	if r.Code != 200 || len(h.pub.Sent()) != 1 {
		t.Errorf("valid destination: %d %s", r.Code, r.Body)
	}
}
