-- Replay runs (Client.PlanReplay, StartReplay): a plan is frozen and stored before
-- anything runs, one replay_item row per event in journal order, and a run records who
-- started it, why, when, its selection, options, state and counts (the audit).
-- New tables only: expand-only. Keys lead with the run's random UUID, so that on
-- CockroachDB one run's rows are one span and runs do not share a hot range.
-- https://www.cockroachlabs.com/docs/stable/create-table
CREATE TABLE IF NOT EXISTS replay_run (
    id            UUID        PRIMARY KEY,
    -- planned, running, paused, cancelled or done.
    state         TEXT        NOT NULL DEFAULT 'planned',
    reason        TEXT        NOT NULL DEFAULT '',
    started_by    TEXT        NOT NULL DEFAULT '',
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at    TIMESTAMPTZ,
    finished_at   TIMESTAMPTZ,
    -- The selection as given (JSON), and the tail rule's switch.
    selection     JSONB       NOT NULL,
    tail          BOOL        NOT NULL DEFAULT true,
    -- The plan's counts: events, those selected, those the tail rule added, aggregates,
    -- and events per type (JSON object).
    events        INT8        NOT NULL DEFAULT 0,
    selected_events INT8        NOT NULL DEFAULT 0,
    tail_events   INT8        NOT NULL DEFAULT 0,
    aggregates    INT8        NOT NULL DEFAULT 0,
    types         JSONB       NOT NULL DEFAULT '{}',
    -- Options of the run: publish the messages its handlers emit (else suppress them),
    -- and its rate limit in events per second (0: none).
    publish       BOOL        NOT NULL DEFAULT false,
    rate          FLOAT8      NOT NULL DEFAULT 0
);

-- The frozen plan: one row per event, position = its place in journal order.
-- state: pending, done (replayed: processed or rejected) or dead (failed past the
-- retry policy; it parks its aggregate's replay and live events until the run is
-- cancelled). Marked done in the transaction that ran the event's handler.
CREATE TABLE IF NOT EXISTS replay_item (
    run_id       UUID        NOT NULL,
    position     INT8        NOT NULL,
    event_id     UUID        NOT NULL,
    aggregate_id TEXT        NOT NULL,
    selected     BOOL        NOT NULL,
    state        TEXT        NOT NULL DEFAULT 'pending',
    attempts     INT8        NOT NULL DEFAULT 0,
    next_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    outcome      TEXT,
    error        TEXT,
    at           TIMESTAMPTZ,
    PRIMARY KEY (run_id, position)
);
-- An aggregate's items of a run in order: the runner's "earlier item not done" probe
-- and the release of the aggregate's hold.
CREATE INDEX IF NOT EXISTS replay_item_aggregate ON replay_item (run_id, aggregate_id, position);

-- Aggregates under replay: one row per aggregate of a running or paused run whose
-- items are not all done. Claims of live events skip these aggregates (a probe of this
-- small table's key), so that their live events wait for the replay; the row goes in
-- the transaction that marks the aggregate's last item done, or when the run is
-- cancelled.
CREATE TABLE IF NOT EXISTS replay_hold (
    aggregate_id TEXT NOT NULL,
    run_id       UUID NOT NULL,
    PRIMARY KEY (aggregate_id, run_id)
);

-- The attempt history records the replay run an attempt belongs to; NULL for live
-- processing and retries. Nullable without a default: expand-only.
-- https://www.cockroachlabs.com/docs/stable/alter-table#add-column
ALTER TABLE journal_attempt ADD COLUMN IF NOT EXISTS replay_run UUID;
