// Package feed manages the CockroachDB changefeed that pushes committed journal rows to
// inboxd's HTTPS webhook. Everything here is CockroachDB-only: on PostgreSQL every
// operation returns ErrNeedsCockroachDB, and the SQL is built by pure functions whose
// output the tests pin byte for byte.
//
// # Which rows the feed emits
//
// inboxd writes a journal row once, when it journals the event; processing writes the
// entry's state (status, attempts, last_error, …) to journal_state, never to the journal
// row (v0.3.0). Only an operator's edit (journal.EditAndRetry) rewrites a journal row, its
// payload, and it retries the entry in the same transaction. The retention pruner deletes
// settled entries. A plain `CREATE CHANGEFEED FOR TABLE journal` emits those deletes as
// `"after": null`.
//
// The default, ModeFiltered, uses a CDC query instead:
//
//	CREATE CHANGEFEED INTO 'webhook-https://…' WITH envelope = 'wrapped', …
//	  AS SELECT * FROM journal WHERE event_op() != 'delete'
//
// Why that works (https://www.cockroachlabs.com/docs/stable/cdc-queries):
//   - CDC queries accept any sink URI, the webhook sink included ("Specify the sink URL …
//     See Changefeed Sinks for a list of supported sinks"), and are meant for exactly this:
//     "Filter out specific rows … to decrease the load on your downstream sink and support
//     outbox workloads" (section "Queries and the outbox pattern").
//   - Every version the query keeps is an event to process: each event is emitted once,
//     as it is journaled (and once more after an edit, which retried it). Outcomes,
//     operator retries and replays write journal_state, a table the feed does not watch,
//     so they produce no message; the sweeper picks up what they made due, on either
//     database.
//   - A delete is evaluated with every column but the primary key NULL and event_op() =
//     'delete' ("Known limitations"; "Filter delete messages"), so the pruner's deletes
//     never reach the webhook in this mode. Without the diff option an insert and an
//     update are both 'upsert' ("CDC query function support"), which the query keeps.
//   - Limits that do not bite us: one table per statement (the query cannot join
//     journal_state, and needs not); no volatile functions, sub-selects, aggregates;
//     `now()` is not supported (our predicate uses none of these).
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
// versions where CDC queries are unwanted; the webhook then has to skip deletes
// (after = null).
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
