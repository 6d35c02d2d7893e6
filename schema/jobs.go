package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// schemaJob is a CockroachDB schema change that has not ended: a row of SHOW JOBS.
type schemaJob struct {
	ID          int64
	Status      string
	Description string
}

// schemaChangeJobsSQL lists the schema changes of this role (inboxd's owner, which
// makes every change to inboxd's tables) that have not ended.
//
// On CockroachDB a schema change is a job: cancelling the statement that started it
// (a migrator's context ending, its connection dropped) does not end the job, which
// SHOW JOBS lists and CANCEL JOB ends (https://www.cockroachlabs.com/docs/stable/cancel-query,
// Considerations: "Schema changes are treated differently than other SQL queries. You
// can use SHOW JOBS to monitor the progress of schema changes and CANCEL JOB to cancel
// schema changes"; https://www.cockroachlabs.com/docs/v25.1/show-jobs: job_type SCHEMA CHANGE or
// NEW SCHEMA CHANGE, the declarative schema changer's; status succeeded, failed and
// canceled are the ended ones). A role without VIEWJOB sees the jobs it started
// (https://github.com/cockroachdb/cockroach/pull/44345, "Non-admin users can now query
// SHOW JOBS and crdb_internal.jobs and see their own jobs"), which is all this reads.
// Re-running a migration's ADD COLUMN IF NOT EXISTS while its job still adds the column
// fails (42701, "in the middle of being added"), and an index still being built may
// be taken for built: so a migrator starts only once none runs.
const schemaChangeJobsSQL = `SELECT job_id, status, description FROM [SHOW JOBS]
	WHERE job_type IN ('SCHEMA CHANGE', 'NEW SCHEMA CHANGE')
	AND status NOT IN ('succeeded', 'failed', 'canceled')
	AND user_name = current_user`

// schemaChangeJobs lists the schema changes that have not ended (schemaChangeJobsSQL).
func schemaChangeJobs(ctx context.Context, db database.DB) ([]schemaJob, error) {
	rows, err := db.Query(ctx, schemaChangeJobsSQL)
	if err != nil {
		return nil, fmt.Errorf("listing schema changes in progress: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (schemaJob, error) {
		var j schemaJob
		err := r.Scan(&j.ID, &j.Status, &j.Description)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing schema changes in progress: %w", err)
	}
	return jobs, nil
}

// stuckJobStatus are the statuses in which a job waits for an operator: paused, or
// failed to revert ("it is necessary to manually clean up", SHOW JOBS's docs).
var stuckJobStatus = map[string]bool{"paused": true, "pause-requested": true, "revert-failed": true}

// ErrSchemaChangeStuck is returned when a schema change that a migrator must wait for
// waits for an operator instead (paused, or failed to revert): resume or cancel it
// (RESUME JOB, CANCEL JOB), or clean it up, then migrate again.
var ErrSchemaChangeStuck = errors.New("a schema change in progress waits for an operator")

// waitForJobs waits, polling every lc.poll on the lease's connection, until no schema
// change of lc.jobs runs, or ctx ends. One that waits for an operator is an error at
// once: waiting for it would hold every migrator up.
func waitForJobs(ctx context.Context, conn *leaseConn, lc leaseConfig, when string) error {
	for {
		var jobs []schemaJob
		err := conn.do(ctx, lc.ttl/3, func(ctx context.Context, c *pgx.Conn) error {
			var err error
			jobs, err = lc.jobs(ctx, c)
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: %w", when, err)
		}
		if len(jobs) == 0 {
			return nil
		}
		var stuck []string
		for _, j := range jobs {
			if stuckJobStatus[j.Status] {
				stuck = append(stuck, fmt.Sprintf("job %d (%s): %s", j.ID, j.Status, j.Description))
			}
		}
		if len(stuck) > 0 {
			return fmt.Errorf("%s: %w: %s", when, ErrSchemaChangeStuck, strings.Join(stuck, "; "))
		}
		if err := sleep(ctx, lc.poll); err != nil {
			return fmt.Errorf("%s: waiting for schema change job %d (%s) to end: %w", when, jobs[0].ID, jobs[0].Description, err)
		}
	}
}

// jobPoll is how often a migrator asks again whether schema changes still run.
const jobPoll = time.Second
