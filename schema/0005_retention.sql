-- One ingest batch draws one sequence value and numbers its rows inside the block
-- (journal.SequenceBlock): one replicated write per batch on CockroachDB instead of one
-- per row. Values already drawn stay below the next block, so order is kept.
-- https://www.cockroachlabs.com/docs/stable/alter-sequence
ALTER SEQUENCE journal_sequence_no INCREMENT BY 65536;

-- Retention deletes terminal entries oldest first through this index. Partial, so
-- ingest never pays for it: new rows are RECEIVED.
-- Migration 0028 (v0.3.0) drops the journal's state columns; should this run again on
-- such a database (every migration is re-runnable), the column is gone (42703): done.
-- inboxd:done-if 42703
CREATE INDEX IF NOT EXISTS journal_terminal ON journal (updated_at)
    WHERE status IN ('PROCESSED', 'REJECTED');
