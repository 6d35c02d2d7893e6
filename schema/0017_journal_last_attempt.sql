-- The last handler attempt's start and duration, on the journal row (issue 29). A
-- PROCESSED attempt whose handler ran once, nearly every event's, is no longer written
-- to journal_attempt: settling it wrote a second row, its index entry and one more
-- statement per batch, about a tenth of processing's database time. The attempt
-- history (journal.Attempts) shows it from these columns. Nullable without a default:
-- expand-only, no backfill on either database, and a release before this one neither
-- writes nor needs them (it keeps writing that attempt's history row, which then wins).
-- https://www.cockroachlabs.com/docs/stable/alter-table#add-column
ALTER TABLE journal ADD COLUMN IF NOT EXISTS last_started_at TIMESTAMPTZ;

ALTER TABLE journal ADD COLUMN IF NOT EXISTS last_duration_ms INT8;
