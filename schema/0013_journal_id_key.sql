-- Issue 22.3, any event id: the journal's primary key is computed in Go at ingest
-- (message.JournalID: the event id itself when it is a UUID, else the UUIDv5 of the
-- event's key) and inserted explicitly, so the column stops being generated from
-- payload->>'id'. Existing rows keep their ids, so GET /journal/{id} is unchanged.
-- The two databases spell this differently; the runner runs the statement of its own
-- database (see Statement in schema.go).
--
-- PostgreSQL 13+: https://www.postgresql.org/docs/15/sql-altertable.html#SQL-ALTERTABLE-DESC-DROP-EXPRESSION
-- IF EXISTS makes a second run a no-op.
-- inboxd:only postgresql
ALTER TABLE journal ALTER COLUMN id DROP EXPRESSION IF EXISTS;
-- CockroachDB converts a stored computed column into a regular one with DROP STORED:
-- https://www.cockroachlabs.com/docs/stable/computed-columns#convert-a-computed-column-into-a-regular-column
-- https://www.cockroachlabs.com/docs/stable/alter-table#alter-column (… DROP STORED).
-- It has no IF EXISTS; run again, it fails with 42611 "column "id" is not a computed
-- column" (pkg/sql/alter_table.go, case *tree.AlterTableDropStored), which means done.
-- inboxd:only cockroachdb
-- inboxd:done-if 42611
ALTER TABLE journal ALTER COLUMN id DROP STORED;
