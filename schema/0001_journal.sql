-- The inbox journal: one row per distinct event id, whatever the broker redelivers.
-- Every statement here is accepted by both PostgreSQL 15 and CockroachDB.
CREATE SEQUENCE IF NOT EXISTS journal_sequence_no;

CREATE TABLE IF NOT EXISTS journal (
    -- The primary key is computed from the payload, so a redelivery can only collide, never duplicate.
    -- https://www.cockroachlabs.com/docs/stable/computed-columns
    id              UUID        GENERATED ALWAYS AS ((payload->>'id')::UUID) STORED PRIMARY KEY,
    payload         JSONB       NOT NULL,
    event_type      TEXT        NOT NULL,
    aggregate_id    TEXT        NOT NULL,
    -- Ingest order; events of one aggregate are processed in this order.
    sequence_no     BIGINT      NOT NULL DEFAULT nextval('journal_sequence_no'),
    -- Where the event came from (the STOMP destination).
    tag             TEXT        NOT NULL DEFAULT '',
    status          TEXT        NOT NULL DEFAULT 'RECEIVED',
    attempts        INT         NOT NULL DEFAULT 0,
    last_error      TEXT,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    received_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at    TIMESTAMPTZ,
    CONSTRAINT journal_status_valid CHECK (status IN ('RECEIVED', 'PROCESSED', 'FAILED', 'DEAD', 'REJECTED'))
);

-- JSON containment queries (payload @> '{"jurisdiction":"mga"}'); an inverted index on CockroachDB.
CREATE INDEX IF NOT EXISTS journal_payload_gin ON journal USING GIN (payload);

-- Pending work only: stays small however large the journal grows, so the sweeper's scan is cheap.
-- Migration 0028 (v0.3.0) drops the journal's state columns; should this run again on
-- such a database (every migration is re-runnable), the column is gone (42703): done.
-- inboxd:done-if 42703
CREATE INDEX IF NOT EXISTS journal_pending ON journal (next_attempt_at)
    INCLUDE (status, aggregate_id, sequence_no)
    WHERE status IN ('RECEIVED', 'FAILED');

-- Per-aggregate ordering check: "is an earlier event of this aggregate still pending?"
-- inboxd:done-if 42703
CREATE INDEX IF NOT EXISTS journal_aggregate_pending ON journal (aggregate_id, sequence_no)
    WHERE status IN ('RECEIVED', 'FAILED');

-- Listings by type, newest or oldest first, with keyset pagination on sequence_no.
CREATE INDEX IF NOT EXISTS journal_type_seq ON journal (event_type, sequence_no);

-- What needs an operator's attention. Partial, so ingest never pays for it: new rows are
-- RECEIVED, and every index maintained on insert costs ingest throughput.
-- inboxd:done-if 42703
CREATE INDEX IF NOT EXISTS journal_attention ON journal (status, sequence_no)
    WHERE status IN ('FAILED', 'DEAD', 'REJECTED');

-- Messages that cannot enter the journal, kept byte for byte with the reason.
CREATE TABLE IF NOT EXISTS quarantine (
    -- Derived from reason, destination and body, so a redelivered bad message is recorded once.
    id            UUID        PRIMARY KEY,
    reason        TEXT        NOT NULL,
    detail        TEXT        NOT NULL DEFAULT '',
    destination   TEXT        NOT NULL,
    message_id    TEXT        NOT NULL DEFAULT '',
    headers       JSONB       NOT NULL DEFAULT '{}',
    body          BYTEA       NOT NULL,
    -- For id_conflict: the journal entry that kept the first payload.
    event_id      UUID,
    received_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    reinjected_at TIMESTAMPTZ
);

CREATE INDEX IF NOT EXISTS quarantine_received ON quarantine (received_at, id);
