-- The journal event whose handler emitted each outbox row (Emit inside a handler), so
-- that a shadow run can compare what a changed handler would emit with what was
-- emitted. Nullable without a default: expand-only, no backfill, and a release before
-- this one, which does not write it, leaves it NULL, which a shadow run reports as
-- "unknown", as it does a row emitted by a BatchHandler's set-based call.
-- https://www.cockroachlabs.com/docs/stable/alter-table#add-column
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS event_id UUID;
-- A shadow run reads an event's rows by it; partial, so rows without an event cost the
-- index nothing. Non-unique: an event emits any number of rows.
-- https://www.cockroachlabs.com/docs/stable/partial-indexes
CREATE INDEX IF NOT EXISTS outbox_event ON outbox (event_id) WHERE event_id IS NOT NULL;
