package process_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// On PostgreSQL every statement of a processing transaction gets a custom plan, made for
// the tables as they are. pgx prepares its statements, and PostgreSQL would otherwise
// keep a generic plan made while the journal was small: recording outcomes then scanned
// the whole journal in every batch until the next ANALYZE, and the push path at 3,000
// msg/s fell behind in one run of two.
func TestProcessingPlansForTheTablesAsTheyAre(t *testing.T) {
	db := testenv.NewDB(t)
	var mode string
	reg := process.NewRegistry()
	reg.Register("probe", process.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev process.Event) error {
		return tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode')`).Scan(&mode)
	}))
	e := process.New(db.Pool, reg, process.Config{}, metrics.New(), nil)
	ids := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{Type: "probe"}))
	if _, err := e.ProcessBatch(context.Background(), []process.Item{{ID: ids[0]}}); err != nil {
		t.Fatal(err)
	}
	if mode != "force_custom_plan" {
		t.Errorf("plan_cache_mode in the processing transaction = %q, want force_custom_plan", mode)
	}
	var after string
	if err := db.Pool.QueryRow(context.Background(), `SELECT current_setting('plan_cache_mode')`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != "auto" {
		t.Errorf("plan_cache_mode outside it = %q, want the session's auto (SET LOCAL)", after)
	}
}
