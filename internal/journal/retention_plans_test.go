package journal

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
)

// TestPruneReplayRunsPlansUseKeys pins the statements that delete ended replay runs to
// the keys that make their cost the work due: the oldest ended run through the partial
// index replay_run_finished, its items and holds by key. The tables hold 2,000 running
// runs of 10 items each, holding 20,000 aggregates, and 1,000 recently ended runs, none
// of which retention may read row by row; 20 runs are due.
func TestPruneReplayRunsPlansUseKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.NewDB(t)
	for _, sql := range []string{`
		INSERT INTO replay_run (id, state, selection, started_at, finished_at)
		SELECT gen_random_uuid(),
		       CASE WHEN g <= 2000 THEN 'running' WHEN g % 2 = 0 THEN 'done' ELSE 'cancelled' END, '{}',
		       now() - INTERVAL '30 days',
		       CASE WHEN g <= 2000 THEN NULL WHEN g <= 3000 THEN now() - INTERVAL '1 hour' ELSE now() - INTERVAL '30 days' END
		FROM generate_series(1, 3020) AS g`, `
		INSERT INTO replay_item (run_id, position, event_id, aggregate_id, selected, state)
		SELECT r.id, p, gen_random_uuid(), 'agg-' || p::TEXT || '-' || left(r.id::TEXT, 8), true,
		       CASE WHEN r.state = 'running' THEN 'pending' ELSE 'done' END
		FROM replay_run AS r, generate_series(0, 9) AS p`, `
		INSERT INTO replay_hold (aggregate_id, run_id)
		SELECT aggregate_id, run_id FROM replay_item AS i JOIN replay_run AS r ON r.id = i.run_id
		WHERE r.state = 'running'`,
		`ANALYZE replay_run, replay_item, replay_hold`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	var due string
	if err := db.Pool.QueryRow(ctx, sqlDueReplayRun, int64(86400000)).Scan(&due); err != nil {
		t.Fatal(err)
	}
	uses := regexp.MustCompile(`(?:using|on) (replay_\w+)`)
	for _, tc := range []struct {
		name string
		sql  string
		args []any
		want []string
	}{
		{"oldest ended run", sqlDueReplayRun, []any{int64(86400000)}, []string{"replay_run_finished"}},
		{"its items and holds", sqlPruneReplayItems, []any{due, int64(1000)}, []string{"replay_item_pkey|replay_item_aggregate", "replay_hold_pkey"}},
		{"the run", sqlPruneReplayRun, []any{due}, []string{"replay_run_pkey", "replay_item_pkey|replay_item_aggregate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			custom, generic := explain(t, db.Pool, tc.sql, tc.args...)
			for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
				if strings.Contains(plan, "Seq Scan on replay_") {
					t.Errorf("%s plan reads a replay table whole:\n%s", kind, plan)
				}
				used := map[string]bool{}
				for _, m := range uses.FindAllStringSubmatch(plan, -1) {
					used[m[1]] = true
				}
				for _, w := range tc.want {
					a, b, _ := strings.Cut(w, "|")
					if !used[a] && !used[b] {
						t.Errorf("%s plan does not use %s:\n%s", kind, w, plan)
					}
				}
			}
		})
	}
}
