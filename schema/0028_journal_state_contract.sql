-- v0.3.0, the contract release of the state move: journal_state becomes the only home
-- of the entries' state, and the journal keeps what an entry is (its id, payload, type,
-- aggregate, sequence number, tag, trace context, received_at), written once at ingest.
-- A release before v0.2.0 writes the journal's state columns only, so this runs only
-- on a database v0.2.0 served (its mirror writes keep journal_state up to date).
-- inboxd:contract
-- inboxd:requires v0.2.0 26 journal

-- 1. Backfill: the journal's state columns were authoritative until now, and v0.1.0
-- wrote them without journal_state (v0.2.0 mirrored its own writes; an absent row meant
-- "as ingested"). Only rows whose state row is missing or differs are written, so a
-- database v0.2.0 alone served writes little. v0.2.0 instances may still be settling
-- meanwhile: FOR UPDATE OF j locks each such journal row before its values are read
-- (READ COMMITTED rereads a row another transaction changed once it holds the lock,
-- https://www.postgresql.org/docs/15/transaction-iso.html#XACT-READ-COMMITTED; under
-- CockroachDB's SERIALIZABLE a conflicting settle orders before or after the whole
-- statement), so a settle that commits first is copied as it committed, not
-- overwritten with the snapshot's older state. Run again after step 3, the journal's
-- columns are gone (42703, undefined_column): the backfill ran before them, so that
-- means done.
-- https://www.cockroachlabs.com/docs/stable/insert#on-conflict-clause
-- https://www.cockroachlabs.com/docs/stable/select-for-update
-- inboxd:done-if 42703
INSERT INTO journal_state (id, aggregate_id, sequence_no, status, attempts, last_error, next_attempt_at, updated_at,
                           processed_at, skipped_by, skipped_at, last_started_at, last_duration_ms)
SELECT j.id, j.aggregate_id, j.sequence_no, j.status, j.attempts, j.last_error, j.next_attempt_at, j.updated_at,
       j.processed_at, j.skipped_by, j.skipped_at, j.last_started_at, j.last_duration_ms
FROM journal AS j
LEFT JOIN journal_state AS s ON s.id = j.id
WHERE s.id IS NULL
   OR (s.status, s.attempts, s.last_error, s.next_attempt_at, s.updated_at, s.processed_at, s.skipped_by,
       s.skipped_at, s.last_started_at, s.last_duration_ms)
      IS DISTINCT FROM
      (j.status, j.attempts, j.last_error, j.next_attempt_at, j.updated_at, j.processed_at, j.skipped_by,
       j.skipped_at, j.last_started_at, j.last_duration_ms)
FOR UPDATE OF j
ON CONFLICT (id) DO UPDATE SET aggregate_id = excluded.aggregate_id, sequence_no = excluded.sequence_no,
    status = excluded.status, attempts = excluded.attempts, last_error = excluded.last_error,
    next_attempt_at = excluded.next_attempt_at, updated_at = excluded.updated_at,
    processed_at = excluded.processed_at, skipped_by = excluded.skipped_by, skipped_at = excluded.skipped_at,
    last_started_at = excluded.last_started_at, last_duration_ms = excluded.last_duration_ms;

-- 2. The journal's state indexes: their successors are journal_state's (0027). Dropped
-- by name before the columns, so that neither database has to decide what a dropped
-- column takes with it. CockroachDB resolves an index name without its table when the
-- name is unique (https://www.cockroachlabs.com/docs/stable/drop-index).
DROP INDEX IF EXISTS journal_aggregate_pending;

DROP INDEX IF EXISTS journal_attention;

DROP INDEX IF EXISTS journal_aggregate_parked;

DROP INDEX IF EXISTS journal_terminal;

DROP INDEX IF EXISTS journal_pending;

-- On CockroachDB the journal's row-level TTL (internal/feed, BuildTTL) expires entries by
-- status and updated_at, and CockroachDB refuses to drop a column its TTL expression
-- references ("cannot drop column … referenced by row-level TTL expiration expression",
-- pkg/sql/schemachanger/scbuild/internal/scbuildstmt/alter_table_drop_column.go). A TTL
-- expression reads only its own row, so the journal cannot expire by journal_state's
-- status: from v0.3.0 journal.PruneJournal prunes it on CockroachDB too, and the TTL is
-- removed here. RESET (ttl) removes every TTL storage parameter
-- (https://www.cockroachlabs.com/docs/stable/row-level-ttl#remove-row-level-ttl-from-a-table);
-- on a table without one it is a no-op: the "ttl" parameter's reset sets the table's
-- row-level TTL to none, whatever it was (onReset of `ttl` in
-- pkg/sql/storageparam/tablestorageparam/table_storage_param.go), so a second run is
-- harmless too. Not run against a live CockroachDB here.
-- inboxd:only cockroachdb
ALTER TABLE journal RESET (ttl);

-- v0.2.0 expired journal_state with the journal's expression; the pruner deletes an
-- entry and its state row together from now on, and finds the entry through the state
-- row, so the state row must not expire on its own first.
-- inboxd:only cockroachdb
ALTER TABLE journal_state RESET (ttl);

-- 3. The state columns and the CHECK on status. DROP CONSTRAINT and DROP COLUMN take
-- IF EXISTS on both databases, so a second run is a no-op; CockroachDB drops a column
-- in an online schema change, the rows' values left for its garbage collection
-- (https://www.cockroachlabs.com/docs/stable/alter-table#drop-constraint,
-- https://www.cockroachlabs.com/docs/stable/alter-table#drop-column,
-- https://www.postgresql.org/docs/15/sql-altertable.html).
ALTER TABLE journal DROP CONSTRAINT IF EXISTS journal_status_valid;

ALTER TABLE journal DROP COLUMN IF EXISTS status;

ALTER TABLE journal DROP COLUMN IF EXISTS attempts;

ALTER TABLE journal DROP COLUMN IF EXISTS last_error;

ALTER TABLE journal DROP COLUMN IF EXISTS next_attempt_at;

ALTER TABLE journal DROP COLUMN IF EXISTS updated_at;

ALTER TABLE journal DROP COLUMN IF EXISTS processed_at;

ALTER TABLE journal DROP COLUMN IF EXISTS skipped_by;

ALTER TABLE journal DROP COLUMN IF EXISTS skipped_at;

ALTER TABLE journal DROP COLUMN IF EXISTS last_started_at;

ALTER TABLE journal DROP COLUMN IF EXISTS last_duration_ms;

-- 4. Entries journaled without a state row after step 1 read the journal: a v0.2.0
-- instance still running while this migrates writes none at ingest (to v0.2.0 an absent
-- row means "as ingested"), and nothing it settles lacks one (it mirrors its settles).
-- They get the state of a new entry, as ingest writes it since v0.3.0, due since they
-- were received. One read of the journal, as step 1; run again, it finds none.
INSERT INTO journal_state (id, aggregate_id, sequence_no, status, attempts, next_attempt_at, updated_at)
SELECT j.id, j.aggregate_id, j.sequence_no, 'RECEIVED', 0, j.received_at, j.received_at
FROM journal AS j
WHERE NOT EXISTS (SELECT 1 FROM journal_state AS s WHERE s.id = j.id)
ON CONFLICT (id) DO NOTHING;
