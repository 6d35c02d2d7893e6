// Package journal owns the SQL of the journal and quarantine tables: the idempotent
// batch insert used by ingest, the status transitions used by processing, and the
// queries used by the API and operator tools.
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
