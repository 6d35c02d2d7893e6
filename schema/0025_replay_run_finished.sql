-- Retention deletes the replay runs that ended (done or cancelled) before its horizon,
-- oldest first, through this index: the runs it reads are the ones it deletes, however
-- many runs are kept. Partial, so runs that have not ended cost it nothing.
-- https://www.cockroachlabs.com/docs/stable/partial-indexes
CREATE INDEX IF NOT EXISTS replay_run_finished ON replay_run (finished_at) WHERE state IN ('done', 'cancelled');
