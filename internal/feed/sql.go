package feed

import "fmt"

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
