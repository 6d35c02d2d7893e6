// Package feed manages the CockroachDB changefeed that pushes committed journal rows to
// inboxd's HTTPS webhook. Everything here is CockroachDB-only: on PostgreSQL every
// operation returns ErrNeedsCockroachDB, and the SQL is built by pure functions whose
// output the tests pin byte for byte.
//
// # Which rows the feed emits
//
// inboxd itself updates journal rows (RECEIVED → PROCESSED/FAILED/DEAD/REJECTED, attempts,
// last_error, updated_at). A plain `CREATE CHANGEFEED FOR TABLE journal` emits every one
// of those updates back to the webhook, so each event costs at least two POSTs, the second
// one carrying a row the webhook has to recognise and ignore, and row-level TTL deletes
// arrive as `"after": null`.
//
// The default, ModeFiltered, uses a CDC query instead:
//
//	CREATE CHANGEFEED INTO 'webhook-https://…' WITH envelope = 'wrapped', …
//	  AS SELECT * FROM journal WHERE status = 'RECEIVED'
//
// Why that works (https://www.cockroachlabs.com/docs/stable/cdc-queries):
//   - CDC queries accept any sink URI, the webhook sink included ("Specify the sink URL …
//     See Changefeed Sinks for a list of supported sinks"), and are meant for exactly this:
//     "Filter out specific rows … to decrease the load on your downstream sink and support
//     outbox workloads" (section "Queries and the outbox pattern").
//   - The WHERE clause is evaluated on the new version of each row; an update whose new
//     row does not match is not emitted. So RECEIVED → PROCESSED produces no message.
//     Neither does an operator's retry or replay: both set the row FAILED with a due
//     next_attempt_at (journal.RetryOne, journal.Requeue), not RECEIVED, and the sweeper
//     picks it up within one interval, on either database.
//   - A delete is evaluated with every column but the primary key NULL ("Known
//     limitations"), so `status = 'RECEIVED'` is NULL for a delete and the delete is
//     filtered out: TTL deletes never reach the webhook in this mode. A predicate that
//     a NULL satisfies (the outbox's `sent_at IS NULL`) needs `event_op() != 'delete'`
//     as well (BuildOutboxCreate).
//   - Limits that do not bite us: one table per statement; no volatile functions, sub-selects,
//     aggregates; `now()` is not supported (our predicate uses none of these).
//
// Options with CDC queries (https://www.cockroachlabs.com/docs/stable/create-changefeed#options):
//   - envelope: the default for CDC queries is `bare` (row columns at top level, metadata
//     under "__crdb__"); `wrapped` is accepted. We always set envelope='wrapped' so the
//     webhook sees the same `after`/`updated` shape in both modes. `key_only` and `row` are
//     for Kafka and sinkless feeds only.
//   - updated, resolved, min_checkpoint_frequency, cursor, initial_scan: accepted as for any
//     changefeed (the cdc-queries page itself uses cursor with a query).
//   - diff: only meaningful with the wrapped envelope (or when the query references
//     cdc_prev); with wrapped it adds a `before` holding the whole previous row.
//   - key_in_value/topic_in_value: CockroachDB forces them on for webhook sinks only when
//     there is no SELECT, so in ModeFiltered the batch elements have no "key" or "topic".
//     The webhook must read the event from "after" (after.id is the key).
//
// ModeTable (`CREATE CHANGEFEED FOR TABLE journal`) remains available for clusters or
// versions where CDC queries are unwanted; the webhook then has to skip rows whose
// after.status is not RECEIVED and deletes (after = null).
//
// # What the webhook receives
//
// Every POST is `Content-Type: application/json`, `Authorization: <webhook_auth_header>`:
//
//	ModeFiltered (default):
//	  {"payload":[{"after":{<all journal columns>},"updated":"<HLC>"}],"length":1}
//	ModeFiltered with Diff:
//	  {"payload":[{"after":{…},"before":{…}|null,"updated":"<HLC>"}],"length":1}
//	ModeTable:
//	  {"payload":[{"after":{…}|null,"key":["<id>"],"topic":"journal","updated":"<HLC>"}],"length":1}
//	resolved (both modes, never wrapped in payload):
//	  {"resolved":"<HLC>"}
//
// "updated" is present only with Options.Updated (DefaultOptions sets it). An HLC is a
// decimal string "<wall nanos>.<10-digit logical>". Field order inside objects is sorted by
// key, but receivers must not depend on it.
//
// # Cluster prerequisites
//
// Changefeeds need `kv.rangefeed.enabled = true`
// (https://www.cockroachlabs.com/docs/stable/create-and-configure-changefeeds#enable-rangefeeds),
// see EnableRangefeedsSQL and Manager.EnableRangefeeds.
package feed
