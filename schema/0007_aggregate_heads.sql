-- One row per aggregate with pending work: its head (the earliest entry still RECEIVED or
-- FAILED, or a DEAD entry that parks the aggregate) and when that head is due. Claims
-- read due heads through aggregate_head_due, so their cost follows the due work, not
-- the events waiting behind failed or parked heads, nor the settled journal. It is kept
-- by the statements that journal and settle events (internal/journal/heads.go), in the
-- same transactions; no triggers, which CockroachDB lacks.
CREATE TABLE IF NOT EXISTS aggregate_head (
    aggregate_id TEXT        PRIMARY KEY,
    head_id      UUID        NOT NULL,
    head_seq     BIGINT      NOT NULL,
    -- The head's next_attempt_at.
    due_at       TIMESTAMPTZ NOT NULL,
    -- The head is RECEIVED: the sweeper takes it only once it is older than its grace.
    received     BOOL        NOT NULL,
    -- The head is DEAD and not skipped: its successors wait for an operator.
    parked       BOOL        NOT NULL DEFAULT false
);

-- Due heads, oldest first; parked aggregates stay out of it.
CREATE INDEX IF NOT EXISTS aggregate_head_due ON aggregate_head (received, due_at)
    WHERE NOT parked;

CREATE INDEX IF NOT EXISTS aggregate_head_parked ON aggregate_head (aggregate_id)
    WHERE parked;

-- An operator's skip of a DEAD head: who and when. A DEAD entry not skipped parks its
-- aggregate.
ALTER TABLE journal ADD COLUMN IF NOT EXISTS skipped_by TEXT;

ALTER TABLE journal ADD COLUMN IF NOT EXISTS skipped_at TIMESTAMPTZ;

-- Migration 0028 (v0.3.0) drops the journal's state columns; should this run again on
-- such a database (every migration is re-runnable), the column is gone (42703): done.
-- inboxd:done-if 42703
CREATE INDEX IF NOT EXISTS journal_aggregate_parked ON journal (aggregate_id, sequence_no)
    WHERE status = 'DEAD' AND skipped_at IS NULL;

-- Entries that died before parking existed did not hold their successors back; they
-- keep not doing so.
-- inboxd:done-if 42703
UPDATE journal SET skipped_by = 'inboxd: DEAD before parking (migration 0007)', skipped_at = now()
WHERE status = 'DEAD' AND skipped_at IS NULL;

-- Backfill: the head of every aggregate with pending work. Idempotent.
-- inboxd:done-if 42703
INSERT INTO aggregate_head (aggregate_id, head_id, head_seq, due_at, received)
SELECT DISTINCT ON (aggregate_id) aggregate_id, id, sequence_no, next_attempt_at, status = 'RECEIVED'
FROM journal
WHERE status IN ('RECEIVED', 'FAILED')
ORDER BY aggregate_id, sequence_no
ON CONFLICT (aggregate_id) DO NOTHING;
