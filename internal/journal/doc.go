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
package journal
