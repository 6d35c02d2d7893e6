// Package journal owns the SQL of the journal and quarantine tables: the idempotent
// batch insert used by ingest, the status transitions used by processing, and the
// queries used by the API and operator tools.
//
// An entry is two rows with one id: its journal row, what the event is (payload, type,
// aggregate, sequence number, tag, trace context, received_at), written once by ingest
// and changed after that only by an operator's edit of the payload; and its
// journal_state row (migrations 0026-0028), where processing and operators record what
// became of it (status, attempts, last_error, next_attempt_at, updated_at,
// processed_at, skipped_by, skipped_at, last_started_at, last_duration_ms). Ingest
// writes both in one statement, retention deletes both in one statement, and every
// statement that reads or changes the state reads journal_state, joined to the journal
// by id for the rest. Claims lock journal_state rows only.
//
// Statuses:
//
//	RECEIVED  ingested, waiting to be processed
//	PROCESSED business effect committed (terminal)
//	FAILED    handler error; retried at next_attempt_at
//	DEAD      gave up after the maximum attempts (operator action needed)
//	REJECTED  the handler refused the event as invalid business input (terminal)
//
// # The shapes of a journal row
//
// An event passes through several types, each holding what its stage has, no more:
//
//	message.Event        a decoded message, before any row exists: the columns ingest writes
//	journal.Entry        message.Event with where it came from (destination, headers, trace) for the insert
//	journal.Head         a claimed row: the columns processing reads, plus Due and Blocked, which only a claim computes
//	process.Item         an id to process, with the ordering hints known before the claim (no row read yet)
//	process.Event        what the engine's handlers get: Head without the bookkeeping (status, due, trace)
//	inboxd.Event         the public process.Event, with Key, which only the client's id source can read back
//	webhook.JournalRow   a changefeed's projection of a row: any subset of columns, in the CDC's text forms
//	journal.Record       every column, for the API and operators
package journal
