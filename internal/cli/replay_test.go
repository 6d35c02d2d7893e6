package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/inboxdtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// "inboxd replay" plans, starts, runs and reports a replay with the program's own
// handlers, printing the run as JSON.
func TestReplayCommand(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	replayed := 0
	handler := inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		if ev.Mode == inboxd.ModeReplay {
			replayed++
		}
		return nil
	})
	inboxdtest.Run(t, db.Pool, "order.placed", handler,
		inboxdtest.Message{Body: []byte(`{"id":"a-1"}`)}, inboxdtest.Message{Body: []byte(`{"id":"a-2"}`)})
	replay := func(args ...string) (int, inboxd.ReplayRun, string) {
		var out, errOut bytes.Buffer
		code := Main(append([]string{"replay", args[0], "-database-url", db.URL}, args[1:]...), &out, &errOut,
			Options{Handle: func(c *inboxd.Client) { c.Handle("order.placed", handler) }})
		var run inboxd.ReplayRun
		if code == 0 {
			if err := json.Unmarshal(out.Bytes(), &run); err != nil {
				t.Fatalf("replay %s: %v\n%s", args[0], err, out.String())
			}
		}
		return code, run, errOut.String()
	}
	code, run, errOut := replay("plan", "-type", "order.placed")
	if code != 0 || run.State != "planned" || run.Events != 2 {
		t.Fatalf("plan: exit %d, %+v %s", code, run, errOut)
	}
	if code, _, errOut = replay("start", run.ID); code == 0 || !strings.Contains(errOut, "-reason is required") {
		t.Fatalf("start without -reason: exit %d, %s", code, errOut)
	}
	if code, run, errOut = replay("start", "-reason", "fix", run.ID); code != 0 || run.State != "running" || run.Reason != "fix" {
		t.Fatalf("start: exit %d, %+v %s", code, run, errOut)
	}
	if code, run, errOut = replay("run", run.ID); code != 0 || run.State != "done" || run.Done != 2 || replayed != 2 {
		t.Fatalf("run: exit %d, %+v, %d replayed %s", code, run, replayed, errOut)
	}
	if code, _, errOut = replay("cancel", run.ID); code == 0 || errOut == "" {
		t.Fatalf("cancelling a done run: exit %d, %q; want a failure that says why", code, errOut)
	}
}
