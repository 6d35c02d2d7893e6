-- The attempt history: one row per recorded handler attempt (its immediate retries
-- included), written with the attempt's outcome in the same round trip
-- (journal.RecordOutcomesGuarded). Bounded like the journal: attempts per entry by the
-- retry policy, rows in all by retention, which deletes an entry's attempts with it on
-- PostgreSQL (journal.PruneJournal) and by row-level TTL on CockroachDB (feed).
-- The key leads with the entry's id (random UUIDs: no hot range on CockroachDB) and
-- reads one entry's timeline in order.
CREATE TABLE IF NOT EXISTS journal_attempt (
    journal_id  UUID        NOT NULL,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- journal.attempts after this attempt (an operator retry starts again at 1).
    attempt     INT8        NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL,
    duration_ms INT8        NOT NULL,
    -- Handler runs in this attempt: 1 + the immediate retries it took.
    runs        INT8        NOT NULL,
    -- PROCESSED, REJECTED, FAILED or DEAD.
    outcome     TEXT        NOT NULL,
    error       TEXT,
    PRIMARY KEY (journal_id, recorded_at)
);
