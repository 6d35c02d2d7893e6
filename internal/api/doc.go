// Package api is inboxd's REST API server: journal queries and statistics, operator
// actions (retry, replay, skip, edit-and-retry, quarantine download and reinjection),
// health, readiness, metrics and the OpenAPI document that describes all of them. Routes
// of a program's own (the demo's POST /registration) are mounted as Extensions.
//
// Access: /admin/* needs the admin token, /journal/* the read or admin token; with no
// token set at all, both are served to this machine only, and with a read token alone,
// /admin/* is served to nobody (package httpsec, and SECURITY.md).
//
// Every response is JSON, and every error is {"error": "...", "detail": ...}, Echo's own
// 404 and 405 included. Listings use keyset pagination on sequence_no (on received_at
// and id for the quarantine) with an opaque cursor, never OFFSET.
//
// Operator actions:
//   - retry (one entry, or every FAILED/DEAD/REJECTED entry matching a filter) and replay
//     (every matching entry, PROCESSED included) requeue an entry as FAILED with attempts 0
//     and next_attempt_at now(), which the sweeper and the processing engine pick up at
//     once; see journal.Requeue. Handlers are idempotent by event id, so a replay repeats
//     no business effect.
//   - reinjecting a quarantined message publishes its raw body again and marks the row;
//     a second call is a 200 no-op ("already_reinjected") unless "force": true.
//
// The API depends on small interfaces (Publisher, Database, ReadyCheck,
// WatermarkReader) rather than on the packages that implement them.
package api
