-- The state of each journal entry, apart from the entry itself (see the v0.2.0 notes).
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
