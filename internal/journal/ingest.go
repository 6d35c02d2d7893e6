package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/message"
)

// Entry is one valid event to ingest.
type Entry struct {
	Event       message.Event
	Destination string
	// MessageID and Headers are kept with the row in quarantine if the database
	// refuses the entry; Headers is called only then (nil: none).
	MessageID string
	Headers   func() map[string]string
	// TraceContext is the message's W3C trace context as tracing.Extract returns it
	// (bounded JSON), or "" for none (NULL).
	TraceContext string
}

// Bad is one message to quarantine.
type Bad struct {
	Reason      message.Reason
	Detail      string
	Destination string
	MessageID   string
	Headers     map[string]string
	Body        []byte
	EventID     string // for id_conflict, the journal entry that kept the first payload

	id          string // quarantine id, from the message as received (set by boundBad)
	headerBytes int    // size of Headers as JSON (set by boundBad)
}

// Batch is what one ingest transaction writes.
type Batch struct {
	Entries []Entry
	Bad     []Bad
	// MaxStatementBytes bounds each statement Ingest sends (see bound.go); 0 means
	// sqlbound.DefaultMaxStatementBytes.
	MaxStatementBytes int
}

// Result counts what a batch did.
type Result struct {
	Inserted    int // new journal rows
	Duplicates  int // entries whose id was already journaled with the same payload
	Conflicts   int // entries whose id was already journaled with a different payload
	Quarantined int // new quarantine rows (bad messages, conflicts, refused entries)
	Refused     int // entries the database refused, quarantined as db_refused
}

// SequenceBlock is journal_sequence_no's increment (migration 0005): one ingest batch
// draws one value and numbers its rows inside the block, so it holds at most this many.
const SequenceBlock = 65536

// ErrBatchTooLarge is returned by Ingest for a batch of more than SequenceBlock entries.
var ErrBatchTooLarge = fmt.Errorf("batch exceeds %d entries, the size of one sequence block", SequenceBlock)

// ingestSQL writes a whole batch in one statement, hence one implicit transaction and
// one round trip: new journal rows, each with its state row (journal_state), and
// quarantined messages. It returns the arrival
// ordinals of the entries it neither inserted nor found journaled with the same payload:
// id conflicts (an id already journaled with another payload) and rows another
// transaction inserted while it ran; racedSQL judges those in a second statement. Most
// batches have none, so an entry's conflict quarantine id (a SHA-256) is computed only
// for them, and the journal is read only for the entries the insert skipped: a
// duplicate costs a lookup, a new entry none (issue 29).
//
// Rows are inserted in id order, so that two batches written at once lock the ids they
// share in the same order and cannot deadlock. Their sequence numbers come from arrival
// order (WITH ORDINALITY), because that order is what orders the events of one aggregate:
// the batch draws ONE value from journal_sequence_no, which increments by
// SequenceBlock (migration 0005), and row ord gets first_seq + ord - 1. Nothing depends
// on the planner: CockroachDB ignores an ORDER BY in a FROM subquery
// (https://www.cockroachlabs.com/docs/stable/order-by#order-preservation), so drawing
// nextval per row "in order" was not guaranteed, and each nextval is a replicated write
// there (https://www.cockroachlabs.com/docs/stable/create-sequence#considerations).
// MATERIALIZED evaluates the draw once on both databases
// (https://www.cockroachlabs.com/docs/stable/common-table-expressions). The sequence has
// no PER NODE CACHE, which would give up the cross-node order aggregates rely on.
// The journal is read in one place, same, one skipped entry at a time: a LATERAL subquery
// with a LIMIT is not pulled up into a join, so no plan can hash-join a scan of the
// whole journal, and with sendIngest's ban on sequential scans each lookup is by
// journal_pkey, even in a generic plan made while the journal was empty. CockroachDB
// runs LATERAL subqueries
// (https://www.cockroachlabs.com/docs/stable/subqueries#lateral-subqueries) and lets a
// statement read what its data-modifying CTE returns
// (https://www.cockroachlabs.com/docs/stable/common-table-expressions#data-modifying-statements).
// Whichever snapshot a database gives that read, an entry it does not show with the same
// payload goes to racedSQL, which reads the journal anew.
const ingestSQL = `
WITH input AS (
	SELECT t.id::UUID AS id, t.raw::JSONB AS payload, t.event_type, t.aggregate_id, t.tag, t.ord,
	       NULLIF(t.trace_context, '')::JSONB AS trace_context
	FROM unnest($13::TEXT[], $1::TEXT[], $2::TEXT[], $3::TEXT[], $4::TEXT[], $14::TEXT[])
	     WITH ORDINALITY AS t(id, raw, event_type, aggregate_id, tag, trace_context, ord)
),
block AS MATERIALIZED (
	SELECT nextval('journal_sequence_no') AS first_seq
),
ins AS (
	INSERT INTO journal (id, payload, event_type, aggregate_id, tag, sequence_no, trace_context)
	SELECT i.id, i.payload, i.event_type, i.aggregate_id, i.tag, b.first_seq + i.ord - 1, i.trace_context FROM input AS i CROSS JOIN block AS b
	ORDER BY i.id
	ON CONFLICT (id) DO NOTHING
	RETURNING id, aggregate_id, sequence_no
),
state AS (
	-- Each new entry's state row (journal_state, migrations 0026-0028), in the same
	-- statement. Unreferenced, it still runs once on both databases
	-- (common-table-expressions#data-modifying-statements). A state row left by an entry
	-- deleted behind inboxd's back is overwritten: the entry is new.
	INSERT INTO journal_state (id, aggregate_id, sequence_no, status, attempts, next_attempt_at, updated_at)
	SELECT n.id, n.aggregate_id, n.sequence_no, 'RECEIVED', 0, now(), now() FROM ins AS n
	ORDER BY n.id
	ON CONFLICT (id) DO UPDATE SET aggregate_id = excluded.aggregate_id, sequence_no = excluded.sequence_no,
	    status = 'RECEIVED', attempts = 0, last_error = NULL, next_attempt_at = excluded.next_attempt_at,
	    updated_at = excluded.updated_at, processed_at = NULL, skipped_by = NULL, skipped_at = NULL,
	    last_started_at = NULL, last_duration_ms = NULL
	RETURNING 1
),
skipped AS (
	SELECT i.id, i.ord, i.payload FROM input AS i WHERE i.id NOT IN (SELECT id FROM ins)
),
same AS (
	SELECT s.ord FROM skipped AS s
	CROSS JOIN LATERAL (SELECT j.payload FROM journal AS j WHERE j.id = s.id LIMIT 1) AS e
	WHERE e.payload = s.payload
),
heads AS (
	-- The head of each aggregate that had none; see heads.go. DO UPDATE rather than DO
	-- NOTHING: it takes the row lock that orders ingest with SyncHeads. Unreferenced, it
	-- still runs once on both databases (common-table-expressions#data-modifying-statements).
	INSERT INTO aggregate_head (aggregate_id, head_id, head_seq, due_at, received)
	SELECT DISTINCT ON (i.aggregate_id) i.aggregate_id, i.id, b.first_seq + i.ord - 1, now(), true
	FROM input AS i CROSS JOIN block AS b
	WHERE i.id IN (SELECT id FROM ins)
	ORDER BY i.aggregate_id, i.ord
	-- The WHERE leaves the row as it is (locked all the same) unless this batch's
	-- entry comes first: two batches written at once then do not conflict on it.
	ON CONFLICT (aggregate_id) DO UPDATE SET head_id = excluded.head_id, head_seq = excluded.head_seq,
	    due_at = excluded.due_at, received = true
	WHERE excluded.head_seq < aggregate_head.head_seq AND NOT aggregate_head.parked
	RETURNING 1
),
q AS (
	INSERT INTO quarantine (id, reason, detail, destination, message_id, headers, body, event_id)
	SELECT b.id::UUID, b.reason, b.detail, b.destination, b.message_id, b.headers::JSONB, b.body, NULLIF(b.event_id, '')::UUID
	FROM unnest($5::TEXT[], $6::TEXT[], $7::TEXT[], $8::TEXT[], $9::TEXT[], $10::TEXT[], $11::BYTEA[], $12::TEXT[])
	     AS b(id, reason, detail, destination, message_id, headers, body, event_id)
	ORDER BY b.id
	ON CONFLICT (id) DO UPDATE SET reinjected_at = NULL, received_at = now()
	    WHERE quarantine.reinjected_at IS NOT NULL -- re-injected, and bad again
	RETURNING reason
)
SELECT (SELECT count(*) FROM ins),
       (SELECT count(*) FROM q),
       ARRAY(SELECT s.ord FROM skipped AS s WHERE s.ord NOT IN (SELECT ord FROM same) ORDER BY s.ord)`

// racedSQL settles the entries ingestSQL could not judge: id conflicts, and rows another
// transaction inserted while the statement ran (it waited for them, then did nothing),
// which its snapshot did not show. A new statement sees them committed, so a different
// payload is recorded as an id_conflict here, in a transaction of its own: should the
// process stop in between, the message is not acknowledged, and its redelivery finds
// the conflict again. It is idempotent, like the rest of the batch, and quarantines a
// re-injected conflict again as ingestSQL does any re-injected bad message. An error
// here fails ingest like one of ingestSQL's, so a value the database refuses is isolated
// the same way (ingestIsolating).
// convert_to(text, 'UTF8') turns the raw body text back into bytes on both databases
// (a TEXT::BYTEA cast would interpret backslash escapes);
// https://www.cockroachlabs.com/docs/stable/functions-and-operators#string-and-byte-functions
const racedSQL = `
WITH raced AS (
	SELECT t.id::UUID AS id, t.raw, t.raw::JSONB AS payload, t.tag, t.conflict_id::UUID AS conflict_id
	FROM unnest($4::TEXT[], $1::TEXT[], $2::TEXT[], $3::TEXT[]) AS t(id, raw, tag, conflict_id)
),
differs AS (
	SELECT r.*, j.id AS event_id FROM raced AS r JOIN journal AS j ON j.id = r.id
	WHERE j.payload <> r.payload
),
q AS (
	INSERT INTO quarantine (id, reason, detail, destination, body, event_id)
	SELECT conflict_id, 'id_conflict', 'id already journaled with a different payload; the journal keeps the first',
	       tag, convert_to(raw, 'UTF8'), event_id
	FROM differs ORDER BY conflict_id
	ON CONFLICT (id) DO UPDATE SET reinjected_at = NULL, received_at = now()
	    WHERE quarantine.reinjected_at IS NOT NULL -- re-injected, and a conflict again
	RETURNING 1
)
SELECT (SELECT count(*) FROM differs), (SELECT count(*) FROM q)`

// Ingest writes a batch. When it returns nil every entry is either in the journal or in
// quarantine, durably; when it returns an error nothing may be acknowledged (parts of
// the batch may be written: a redelivery collapses onto them).
//
// A row the database refuses for a deterministic reason (see IsUnavailable) would fail
// the whole statement, batch after batch; Ingest then splits the batch until each
// refused entry stands alone and quarantines it as db_refused (see refuse.go), so one
// poison message never blocks a queue.
//
// Each statement stays under b.MaxStatementBytes (bound.go): a larger batch is written
// as several statements in arrival order, and a message too large for one statement is
// quarantined too_large with as much of its body as fits.
func Ingest(ctx context.Context, db database.DB, b Batch) (Result, error) {
	if len(b.Entries) == 0 && len(b.Bad) == 0 {
		return Result{}, nil
	}
	if len(b.Entries) > SequenceBlock {
		return Result{}, fmt.Errorf("ingesting a batch of %d entries: %w", len(b.Entries), ErrBatchTooLarge)
	}
	entries, bad, dups, conflicts := dedupe(b.Entries, b.Bad)
	res, err := ingestBounded(ctx, db, entries, bad, maxStatementOf(b))
	if err != nil {
		return Result{}, err
	}
	res.Duplicates += dups
	res.Conflicts += conflicts
	return res, nil
}

func ingest(ctx context.Context, db database.DB, entries []Entry, bad []Bad) (Result, error) {
	bad, badIDs := uniqueBad(bad)
	payloads := make([]string, len(entries))
	types := make([]string, len(entries))
	aggs := make([]string, len(entries))
	tags := make([]string, len(entries))
	ids := make([]string, len(entries))
	traces := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.Event.ID
		traces[i] = e.TraceContext
		payloads[i] = string(e.Event.Payload)
		types[i] = e.Event.EventType
		aggs[i] = e.Event.AggregateID
		tags[i] = e.Destination
	}
	reasons := make([]string, len(bad))
	details := make([]string, len(bad))
	dests := make([]string, len(bad))
	msgIDs := make([]string, len(bad))
	headers := make([]string, len(bad))
	bodies := make([][]byte, len(bad))
	eventIDs := make([]string, len(bad))
	for i, q := range bad {
		reasons[i] = string(q.Reason)
		details[i] = makeStorable(q.Detail)
		dests[i] = makeStorable(q.Destination)
		msgIDs[i] = makeStorable(q.MessageID)
		clean := make(map[string]string, len(q.Headers))
		for k, v := range q.Headers {
			clean[makeStorable(k)] = makeStorable(v)
		}
		h, err := json.Marshal(clean)
		if err != nil {
			h = []byte("{}")
		}
		headers[i] = string(h)
		bodies[i] = q.Body
		eventIDs[i] = q.EventID
	}
	var res Result
	var inserted, conflicts, quarantined int64
	var raced []int64
	args := []any{payloads, types, aggs, tags, badIDs, reasons, details, dests, msgIDs, headers, bodies, eventIDs, ids, traces}
	err := retrySerialization(ctx, func() error {
		return sendIngest(ctx, db, args, &inserted, &quarantined, &raced)
	})
	if err != nil {
		return Result{}, fmt.Errorf("inserting batch of %d entries and %d bad messages: %w", len(entries), len(bad), err)
	}
	if len(raced) > 0 {
		raws, rtags, rconf, rids := make([]string, len(raced)), make([]string, len(raced)), make([]string, len(raced)), make([]string, len(raced))
		for i, ord := range raced { // ord is 1-based (WITH ORDINALITY)
			e := entries[ord-1]
			raws[i], rtags[i], rids[i] = payloads[ord-1], tags[ord-1], ids[ord-1]
			rconf[i] = message.QuarantineID(message.ReasonIDConflict, e.Destination, e.Event.Payload)
		}
		var moreQ int64
		if err := db.QueryRow(ctx, racedSQL, raws, rtags, rconf, rids).Scan(&conflicts, &moreQ); err != nil {
			return Result{}, fmt.Errorf("checking %d entries journaled with another payload or concurrently elsewhere: %w", len(raced), err)
		}
		quarantined += moreQ
	}
	res.Inserted = int(inserted)
	res.Conflicts = int(conflicts)
	res.Duplicates = len(entries) - res.Inserted - res.Conflicts
	res.Quarantined = int(quarantined)
	return res, nil
}

// genericPlanSQL and noSeqScanSQL make the ingest statement run from one generic plan,
// kept in pgx's statement cache, instead of being planned anew for each batch: planning
// that statement of eight CTEs took 44% of its time at 1,000 msg/s, where a batch holds
// a handful of messages (pg_stat_statements, issue 29), and on its own PostgreSQL keeps
// planning it, since a custom plan for a few rows is estimated cheaper than a generic
// one. That plan is made once per connection and kept while the journal grows, so it
// must not depend on the journal's size: same looks each skipped entry up by key (see
// ingestSQL), and with sequential scans off the lookup is an index scan even when the
// plan is made on an empty journal, which PostgreSQL would otherwise scan once per
// entry (TestIngestPlanReadsTheJournalByKey). No other table of the statement is read
// but through its conflict index. SET LOCAL lasts until the transaction ends. On a
// pool's connection the pipeline is wrapped in BEGIN … COMMIT, in the same round trip:
// its statements would share one implicit transaction anyway
// (https://www.postgresql.org/docs/15/protocol-flow.html#PROTOCOL-FLOW-PIPELINING), but
// PostgreSQL logs a WARNING for every SET LOCAL outside a transaction block, two lines
// in the server's log per batch. In a caller's transaction defaultPlansSQL and
// defaultSeqScanSQL follow. PostgreSQL only: CockroachDB plans its own way.
const (
	defaultPlansSQL   = `SET LOCAL plan_cache_mode = DEFAULT`
	genericPlanSQL    = `SET LOCAL plan_cache_mode = force_generic_plan`
	noSeqScanSQL      = `SET LOCAL enable_seqscan = off`
	defaultSeqScanSQL = `SET LOCAL enable_seqscan = DEFAULT`
)

// ingestConn is what the ingest statement is sent on: a connection or a transaction.
type ingestConn interface {
	batchSender
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// sendIngest runs ingestSQL with args in one round trip and scans its counts into out.
// On PostgreSQL it runs from the generic plan (genericPlanSQL); on CockroachDB, which
// caches plans its own way and may not know plan_cache_mode, and through a DB it cannot
// tell the connection of, it is sent unprepared, as before.
func sendIngest(ctx context.Context, db database.DB, args []any, out ...any) error {
	unprepared := func(q interface {
		QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	}) error {
		return q.QueryRow(ctx, ingestSQL, append([]any{pgx.QueryExecModeCacheDescribe}, args...)...).Scan(out...)
	}
	run := func(c ingestConn, conn *pgx.Conn) error {
		if database.DialectOf(conn) != database.PostgreSQL {
			return unprepared(c)
		}
		inTx := conn.PgConn().TxStatus() != 'I' // a caller's transaction
		b := &pgx.Batch{}
		if !inTx {
			b.Queue(`BEGIN`)
		}
		b.Queue(genericPlanSQL)
		b.Queue(noSeqScanSQL)
		b.Queue(ingestSQL, args...)
		if inTx {
			b.Queue(defaultPlansSQL)
			b.Queue(defaultSeqScanSQL)
		} else {
			b.Queue(`COMMIT`)
		}
		br := c.SendBatch(ctx, b)
		var err error
		if !inTx {
			_, err = br.Exec()
		}
		if err == nil {
			_, err = br.Exec()
		}
		if err == nil {
			_, err = br.Exec()
		}
		if err == nil {
			err = br.QueryRow().Scan(out...)
		}
		for i := 0; err == nil && i < 2 && (inTx || i < 1); i++ {
			_, err = br.Exec()
		}
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if !inTx && conn.PgConn().TxStatus() != 'I' && !conn.PgConn().IsClosed() {
			// A failed statement left the BEGIN open: end it, so that the connection goes
			// back to the pool clean (pgxpool would close it) and the error is the
			// statement's, as without BEGIN.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			_, _ = conn.Exec(rctx, `ROLLBACK`)
			cancel()
		}
		return err
	}
	switch d := db.(type) {
	case pgx.Tx:
		return run(d, d.Conn())
	case *pgx.Conn:
		return run(d, d)
	case *pgxpool.Conn:
		return run(d, d.Conn())
	case interface {
		Acquire(ctx context.Context) (*pgxpool.Conn, error)
	}: // a pool, SerializablePool too
		c, err := d.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("acquiring a connection: %w", err)
		}
		defer c.Release()
		return run(c, c.Conn())
	}
	return unprepared(db)
}

// dedupe collapses repeated ids inside one batch before they reach the database: the
// same payload again is a duplicate, another payload is a conflict to quarantine.
func dedupe(entries []Entry, bad []Bad) (_ []Entry, _ []Bad, dups, conflicts int) {
	seen := make(map[string]int, len(entries))
	out := entries[:0:0]
	for _, e := range entries {
		first, ok := seen[e.Event.ID]
		if !ok {
			seen[e.Event.ID] = len(out)
			out = append(out, e)
			continue
		}
		if jsonEqual(out[first].Event.Payload, e.Event.Payload) {
			dups++
			continue
		}
		conflicts++
		bad = append(bad, Bad{
			Reason:      message.ReasonIDConflict,
			Detail:      "id repeated in one batch with a different payload; the journal keeps the first",
			Destination: e.Destination,
			Body:        e.Event.Payload,
			EventID:     e.Event.ID,
		})
	}
	return out, bad, dups, conflicts
}

// uniqueBad drops repeats of one bad message in a batch: they share a quarantine id, and
// one INSERT … ON CONFLICT DO UPDATE may not touch a row twice.
// It returns the kept messages and their quarantine ids.
func uniqueBad(bad []Bad) ([]Bad, []string) {
	seen := make(map[string]bool, len(bad))
	out, ids := bad[:0:0], make([]string, 0, len(bad))
	for _, b := range bad {
		id := b.id
		if id == "" {
			id = message.QuarantineID(b.Reason, b.Destination, b.Body)
		}
		if !seen[id] {
			seen[id] = true
			out, ids = append(out, b), append(ids, id)
		}
	}
	return out, ids
}

// makeStorable makes a header, id or detail string fit TEXT and JSONB, which refuse NUL and
// invalid UTF-8: a bad message must still be quarantinable. The body keeps its raw bytes.
func makeStorable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

// jsonEqual compares two JSON documents as values. Numbers compare by their text, not
// as float64, which would call 10000000000000001 and 10000000000000000 equal.
func jsonEqual(a, b []byte) bool {
	if string(a) == string(b) {
		return true
	}
	decode := func(d []byte) (any, error) {
		dec := json.NewDecoder(bytes.NewReader(d))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		return v, err
	}
	x, errX := decode(a)
	y, errY := decode(b)
	if errX != nil || errY != nil {
		return false
	}
	ax, _ := json.Marshal(x)
	by, _ := json.Marshal(y)
	return string(ax) == string(by)
}

// IsDataError reports SQLSTATE class 22 (data exception): a value the database will not
// store or compute with, as opposed to the database being unavailable.
func IsDataError(err error) bool { return isDataError(err) }

func isDataError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && len(pgErr.Code) == 5 && pgErr.Code[:2] == "22"
}

// serializationAttempts bounds retryable conflicts (SQLSTATE 40001) on one ingest
// statement, and backoff.Conflict paces them. Its implicit transaction can conflict
// with another batch or with processing moving the same aggregate's head
// (aggregate_head), under SERIALIZABLE: the default on CockroachDB, which retries such
// one-statement transactions itself when it can
// (https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference#client-side-retry-handling),
// or a PostgreSQL configured so, whose SSI also fails disjoint batches that share an
// index page. The statement is idempotent, so running it again is safe. The pauses take
// at most about 3 s in all, inside the commit's timeout. Only then is it an outage.
const serializationAttempts = 12

func retrySerialization(ctx context.Context, fn func() error) error {
	w := backoff.Waiter{Policy: backoff.Conflict}
	for attempt := 1; ; attempt++ {
		err := fn()
		var pgErr *pgconn.PgError
		if err == nil || attempt == serializationAttempts || !errors.As(err, &pgErr) || pgErr.Code != "40001" {
			return err
		}
		if w.Wait(ctx) != nil {
			return err
		}
	}
}
