-- v0.3.0: journal_state (migration 0026) holds the state of every journal entry, and
-- every read and write of that state goes to it. These are its indexes, the journal's
-- state indexes over again (0001, 0005, 0007), which 0028 drops with the columns they
-- index. Each is partial, so ingest, which writes every new entry's state row as
-- RECEIVED, pays only for journal_state_pending.
-- https://www.cockroachlabs.com/docs/stable/partial-indexes

-- Per-aggregate ordering check: "is an earlier event of this aggregate still pending?"
CREATE INDEX IF NOT EXISTS journal_state_pending ON journal_state (aggregate_id, sequence_no)
    WHERE status IN ('RECEIVED', 'FAILED');

-- What needs an operator's attention, in ingest order.
CREATE INDEX IF NOT EXISTS journal_state_attention ON journal_state (status, sequence_no)
    WHERE status IN ('FAILED', 'DEAD', 'REJECTED');

-- The DEAD entries not skipped, which park their aggregates.
CREATE INDEX IF NOT EXISTS journal_state_parked ON journal_state (aggregate_id, sequence_no)
    WHERE status = 'DEAD' AND skipped_at IS NULL;

-- Retention deletes terminal entries oldest first through this index (journal_terminal's
-- successor); rates count the entries settled in a window through it.
CREATE INDEX IF NOT EXISTS journal_state_terminal ON journal_state (updated_at)
    WHERE status IN ('PROCESSED', 'REJECTED');
