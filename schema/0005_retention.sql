-- One ingest batch draws one sequence value and numbers its rows inside the block
-- (journal.SequenceBlock): one replicated write per batch on CockroachDB instead of one
-- per row. Values already drawn stay below the next block, so order is kept.
-- https://www.cockroachlabs.com/docs/stable/alter-sequence
ALTER SEQUENCE journal_sequence_no INCREMENT BY 65536;

-- Retention deletes terminal entries oldest first through this index. Partial, so
-- ingest never pays for it: new rows are RECEIVED.
CREATE INDEX IF NOT EXISTS journal_terminal ON journal (updated_at)
    WHERE status IN ('PROCESSED', 'REJECTED');
