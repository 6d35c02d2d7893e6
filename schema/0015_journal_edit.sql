-- Edit and retry (issue 22, item 5): an operator corrects a DEAD entry's payload and
-- retries it (journal.EditAndRetry). The edit is a row of the entry's attempt history
-- (journal_attempt, migration 0008) with outcome EDITED, carrying the payload as it
-- was, who edited it and from where; recorded_at is when. So it is bounded and expires
-- with the rest of the history (retention: journal.PruneJournal on PostgreSQL,
-- row-level TTL on CockroachDB). NULL on the rows of handler attempts.
-- https://www.cockroachlabs.com/docs/stable/alter-table#add-column
ALTER TABLE journal_attempt ADD COLUMN IF NOT EXISTS original_payload JSONB;

ALTER TABLE journal_attempt ADD COLUMN IF NOT EXISTS edited_by TEXT;

ALTER TABLE journal_attempt ADD COLUMN IF NOT EXISTS edited_from TEXT;
