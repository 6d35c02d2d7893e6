package feed

import (
	"fmt"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/journal"
)

// EnableRangefeedsSQL turns on rangefeeds, without which CREATE CHANGEFEED fails.
// https://www.cockroachlabs.com/docs/stable/create-and-configure-changefeeds#enable-rangefeeds
const EnableRangefeedsSQL = `SET CLUSTER SETTING kv.rangefeed.enabled = true`

// showJobsSQL lists changefeed jobs with the columns Status reports. SHOW CHANGEFEED JOBS
// keeps finished jobs for 12 hours; the [ … ] form lets us pick and coalesce columns.
// https://www.cockroachlabs.com/docs/stable/show-jobs#show-changefeed-jobs
const showJobsSQL = `SELECT job_id, COALESCE(description, ''), COALESCE(status, ''), ` +
	`COALESCE(running_status, ''), COALESCE(high_water_timestamp::STRING, ''), ` +
	`COALESCE(error, ''), COALESCE(sink_uri, '') FROM [SHOW CHANGEFEED JOBS]`

// PauseJobSQL pauses a changefeed; it resumes from its last checkpoint.
// https://www.cockroachlabs.com/docs/stable/pause-job
func PauseJobSQL(id int64) string { return fmt.Sprintf("PAUSE JOB %d", id) }

// ResumeJobSQL resumes a paused changefeed.
// https://www.cockroachlabs.com/docs/stable/resume-job
func ResumeJobSQL(id int64) string { return fmt.Sprintf("RESUME JOB %d", id) }

// CancelJobSQL cancels a changefeed for good; a new one can start where it ended with
// Options.Cursor set to its high-water mark.
// https://www.cockroachlabs.com/docs/stable/cancel-job
func CancelJobSQL(id int64) string { return fmt.Sprintf("CANCEL JOB %d", id) }

// TTLOptions configure a status-based row-level TTL: rows in a terminal status
// (PROCESSED, REJECTED) are deleted Retention after their last update. inboxd no longer
// sets it on the journal: the journal's status and updated_at moved to journal_state
// (v0.3.0), a TTL expression reads only its own row, and deleting an entry deletes both
// rows, so the retention pruner deletes settled entries on CockroachDB too
// (RetentionStatements resets the journal's TTL). BuildTTL and Manager.EnableTTL remain
// for tables that carry both columns.
type TTLOptions struct {
	Table     string        // default "journal"
	Retention time.Duration // required, whole seconds
	Cron      string        // ttl_job_cron, default "@daily"
}

// BuildTTL returns the ALTER TABLE that enables the status-based row-level TTL on
// o.Table, a table with status and updated_at columns (not the journal since v0.3.0).
//
// CockroachDB accepts a TTL expression of at most stable volatility (volatile ones are
// refused: ValidateTTLExpirationExpression, pkg/sql/catalog/schemaexpr/expr.go, "requires
// a maximum volatility of stable"); converting through UTC makes ours immutable besides,
// so the session time zone of the TTL job never moves an expiry. A NULL expiration means
// "never expire". ttl_disable_changefeed_replication keeps the
// TTL job's deletes out of changefeeds: in ModeTable they would otherwise reach the
// webhook as "after": null (ModeFiltered drops them anyway).
// https://www.cockroachlabs.com/docs/stable/row-level-ttl
func BuildTTL(o TTLOptions) (string, error) {
	if o.Table == "" {
		o.Table = "journal"
	}
	if o.Cron == "" {
		o.Cron = "@daily"
	}
	if !identRe.MatchString(o.Table) {
		return "", invalid("table %q: want a lower-case SQL identifier", o.Table)
	}
	if o.Retention < time.Second || o.Retention%time.Second != 0 {
		return "", invalid("ttl retention must be a positive whole number of seconds (got %s)", o.Retention)
	}
	if strings.ContainsAny(o.Cron, "'\x00\r\n") || len(strings.Fields(o.Cron)) == 0 {
		return "", invalid("ttl cron %q: want a cron expression like @daily or '0 3 * * *'", o.Cron)
	}
	expr := fmt.Sprintf(
		`CASE WHEN status IN ('%s', '%s') THEN ((updated_at AT TIME ZONE 'UTC') + '%d seconds'::INTERVAL) AT TIME ZONE 'UTC' END`,
		journal.StatusProcessed, journal.StatusRejected, int64(o.Retention/time.Second))
	return fmt.Sprintf("ALTER TABLE %s SET (ttl_expiration_expression = %s, ttl_job_cron = %s, ttl_disable_changefeed_replication = true)",
		o.Table, quote(expr), quote(o.Cron)), nil
}
