-- A journal entry's mutable state, in a table of its own (the state move, expand step).
-- From the next release on, the journal row is written once, at ingest, and every
-- later change (settle, retry, skip, requeue, edit) writes this small row instead, not
-- the wide journal row with its payload and its indexes. In this release the journal's
-- state columns stay authoritative (the release before it runs beside it and knows only
-- those): every statement that writes them also mirrors them here, in the same
-- statement (v0.2.0: internal/journal, mirrorStateSQL). Ingest writes nothing here: an absent
-- row means "as ingested" (RECEIVED, attempts 0, next_attempt_at = updated_at =
-- received_at, the rest NULL). Deleting a journal row deletes its row here (retention:
-- journal.PruneJournal on PostgreSQL, row-level TTL with the journal's expression on
-- CockroachDB).
-- The columns are the journal's (migrations 0001, 0007, 0017): same names, types and
-- nullability, the same status check. aggregate_id and sequence_no are copies, for the
-- next release's reads by aggregate. No secondary index yet: nothing reads this table
-- in this release, and the next one adds those it reads through. The key is the
-- journal's random UUID: no hot range on CockroachDB.
-- https://www.cockroachlabs.com/docs/stable/create-table
CREATE TABLE IF NOT EXISTS journal_state (
    id               UUID        PRIMARY KEY,
    aggregate_id     TEXT        NOT NULL,
    sequence_no      INT8        NOT NULL,
    status           TEXT        NOT NULL DEFAULT 'RECEIVED',
    attempts         INT         NOT NULL DEFAULT 0,
    last_error       TEXT,
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at     TIMESTAMPTZ,
    skipped_by       TEXT,
    skipped_at       TIMESTAMPTZ,
    last_started_at  TIMESTAMPTZ,
    last_duration_ms INT8,
    CONSTRAINT journal_state_status_valid CHECK (status IN ('RECEIVED', 'PROCESSED', 'FAILED', 'DEAD', 'REJECTED'))
);
