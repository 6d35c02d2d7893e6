-- The runner of a replay run holds a lease on it, renewed between events, so that of
-- several inboxd instances (each runs the running runs) one runs a run at a time, in
-- journal order; a runner that died (kill -9) leaves a lease that expires. Nullable
-- columns without defaults: expand-only.
-- https://www.cockroachlabs.com/docs/stable/alter-table#add-column
ALTER TABLE replay_run ADD COLUMN IF NOT EXISTS runner TEXT;
ALTER TABLE replay_run ADD COLUMN IF NOT EXISTS runner_until TIMESTAMPTZ;
