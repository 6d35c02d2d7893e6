// Package outbox is inboxd's transactional outbox: a handler writes the messages it
// wants sent (Emit) in its processing transaction, so they exist if and only if the
// event's effect committed; the relay then publishes each row to the broker,
// persistent and confirmed by a RECEIPT, and marks it sent.
//
// Messages of one group (Outgoing.Group, else the JMSXGroupID or aggregate-id header)
// are published in emit order, one at a time: seq (one sequence block per insert
// statement) is the emit order, and a relay claims a group only by locking its head, its
// earliest unsent row, so a later row never overtakes an earlier one that failed or is
// held by another relay.
//
// Delivery is at least once: a relay that dies between the broker's receipt and the
// "sent" mark publishes the row again. Every message carries the row's id in the
// outbox-id header, which a downstream inbox (inboxd included, when the body's "id" is
// the same id) uses to drop the duplicate.
//
// The package owns every statement on the outbox table. All of them run on PostgreSQL
// and CockroachDB alike, except the two named pgOnly*, which are sent to PostgreSQL only.
package outbox

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/eventctx"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/sqlbound"
	"github.com/inboxd/inboxd/internal/tracing"
)

// HeaderOutboxID is the header carrying the outbox row id on every relayed message.
const HeaderOutboxID = "outbox-id"

// NotifyChannel is the PostgreSQL LISTEN/NOTIFY channel Emit notifies on commit.
const NotifyChannel = "inboxd_outbox"

// Limits on what Emit accepts: a message must fit a STOMP frame the broker takes
// without fuss, and a header set must stay small.
const (
	MaxBodyBytes      = 1 << 20
	MaxHeaders        = 32
	MaxHeaderNameLen  = 64
	MaxHeaderValueLen = 1024
)

// SeqBlock is outbox_seq's increment (migration 0009): one insert statement draws one
// value and numbers its rows inside the block, so it holds at most this many rows.
const SeqBlock = 65536

// Statements on the outbox table. Durations are passed as milliseconds and cast to
// INT8: CockroachDB rejects an untyped placeholder times an INTERVAL.
const (
	// sqlInsert writes a batch of messages in one statement. It draws ONE value from
	// outbox_seq (increment SeqBlock) and gives row ord first_seq + ord - 1, so the
	// rows keep the order of the arrays (WITH ORDINALITY), and a later statement's rows
	// come after: seq, not created_at (now(), the same for a whole transaction), is the
	// emit order. MATERIALIZED evaluates the draw once on both databases; an ORDER BY in
	// a FROM subquery would not order nextval calls on CockroachDB
	// (https://www.cockroachlabs.com/docs/stable/order-by#order-preservation). Rows are
	// inserted in id order, so that two transactions emitting the same ids lock them in
	// the same order. It returns the ids it inserted; the others were already there.
	sqlInsertRows = `
WITH input AS (
	SELECT t.id::UUID AS id, t.destination, t.headers::JSONB AS headers, t.body, t.grp, t.event_id::UUID AS event_id, t.ord
	FROM unnest($1::TEXT[], $2::TEXT[], $3::TEXT[], $4::BYTEA[], $5::TEXT[], $6::TEXT[])
	     WITH ORDINALITY AS t(id, destination, headers, body, grp, event_id, ord)
),
block AS MATERIALIZED (
	SELECT nextval('outbox_seq') AS first_seq
),
ins AS (
	INSERT INTO outbox (id, destination, headers, body, grp, event_id, seq)
	SELECT i.id, i.destination, i.headers, i.body, i.grp, i.event_id, b.first_seq + i.ord - 1
	FROM input AS i CROSS JOIN block AS b
	ORDER BY i.id
	ON CONFLICT (id) DO NOTHING
	RETURNING id
)
SELECT ARRAY(SELECT id::TEXT FROM ins)`
	sqlInsert = sqlInsertRows + `, ''`

	// pgOnlyInsert is sqlInsert with the relay's wake-up in the same round trip.
	// PostgreSQL only (CockroachDB has no LISTEN/NOTIFY; the outbox changefeed wakes the
	// relay there). NOTIFY is delivered at commit, never on rollback, and the
	// notifications of one transaction on one channel with one payload are folded into
	// one (https://www.postgresql.org/docs/15/sql-notify.html): one wake-up per
	// transaction however many statements emitted.
	pgOnlyInsert = sqlInsertRows + `, pg_notify('` + NotifyChannel + `', '')::TEXT`

	// sqlPickHeads picks, without locking, up to $1 due group heads: unsent rows whose
	// lease has passed and that have no earlier unsent row in their group (a row without
	// a group is its own head). Oldest lease first, in the order of outbox_unsent, so
	// that the scan stops at $1 heads (the order among heads of different groups does
	// not matter). The rows are locked
	// by primary key afterwards (sqlLockHeads): a locking scan of an index with SKIP
	// LOCKED can lock every row it reads on CockroachDB, not only those it returns
	// (cockroach#121917; /work/shared/reference, "SKIP LOCKED over an index join").
	sqlPickHeads = `SELECT o.id::TEXT FROM outbox AS o
		WHERE o.sent_at IS NULL AND o.lease_until <= now()
		  AND NOT EXISTS (
			SELECT 1 FROM outbox AS p
			WHERE p.grp = o.grp AND p.sent_at IS NULL AND p.seq < o.seq)
		ORDER BY o.lease_until
		LIMIT $1`

	// sqlLockHeads locks the picked heads by primary key, skipping any another relay
	// holds, and tells which are still due. The check is in the select list, not in the
	// WHERE clause, so that both databases go by the primary key alone and lock no row
	// beyond those picked. Holding a group's head is what entitles a relay to claim the
	// group: no other relay can lease the head, and none claims a later row of the group
	// while the head is unsent.
	// https://www.cockroachlabs.com/docs/stable/select-for-update (SKIP LOCKED)
	sqlLockHeads = `SELECT id::TEXT, grp, seq, sent_at IS NULL AND lease_until <= now() FROM outbox
		WHERE id = ANY ($1::UUID[])
		ORDER BY id
		FOR UPDATE SKIP LOCKED`

	// sqlLeaseClaim leases, for $5 ms, the locked heads ($1, $2, $3: id, group, seq)
	// and up to $4 rows that follow a head in its group without a gap: due, and with no
	// unsent row between them and the head that is leased or waiting for a retry. Each
	// head's successors are read from outbox_group_order (LATERAL … ORDER BY seq LIMIT),
	// so the statement reads about what it leases, whatever the backlog.
	// https://www.cockroachlabs.com/docs/stable/subqueries#lateral-subqueries
	sqlLeaseClaim = `
WITH heads AS (
	SELECT h.id::UUID AS id, h.grp, h.seq FROM unnest($1::TEXT[], $2::TEXT[], $3::INT8[]) AS h(id, grp, seq)
),
successors AS (
	SELECT f.id FROM heads AS h, LATERAL (
		SELECT n.id, n.seq FROM outbox AS n
		WHERE n.grp = h.grp AND n.seq > h.seq AND n.sent_at IS NULL
		ORDER BY n.seq
		LIMIT $4) AS f
	WHERE NOT EXISTS (
		SELECT 1 FROM outbox AS p
		WHERE p.grp = h.grp AND p.sent_at IS NULL AND p.seq > h.seq AND p.seq <= f.seq
		  AND p.lease_until > now())
	ORDER BY f.seq
	LIMIT $4
)
UPDATE outbox SET lease_until = now() + $5::INT8 * INTERVAL '1 millisecond', attempts = attempts + 1
WHERE id IN (SELECT id FROM heads UNION ALL SELECT id FROM successors)
RETURNING id::TEXT, destination, headers, body, attempts, created_at, grp, seq`

	// sqlSettle records a pass's outcome for every row it claimed in one statement:
	// "sent" (the broker confirmed it), "failed" (retry after delay_ms, recording err),
	// "untried" (given back at once; the claim counted an attempt it did not make).
	sqlSettle = `UPDATE outbox AS o
		SET sent_at = CASE WHEN r.outcome = 'sent' THEN now() END,
		    last_error = CASE r.outcome WHEN 'sent' THEN NULL WHEN 'failed' THEN r.err ELSE o.last_error END,
		    lease_until = CASE r.outcome
		                    WHEN 'failed' THEN now() + r.delay_ms * INTERVAL '1 millisecond'
		                    WHEN 'untried' THEN now()
		                    ELSE o.lease_until END,
		    attempts = CASE WHEN r.outcome = 'untried' THEN o.attempts - 1 ELSE o.attempts END
		FROM unnest($1::UUID[], $2::TEXT[], $3::INT8[], $4::TEXT[]) AS r(id, outcome, delay_ms, err)
		WHERE o.id = r.id AND o.sent_at IS NULL`

	// sqlDeleteSent removes at most $2 rows sent more than $1 ms ago: bounded, so that
	// retention never holds long locks or builds one huge transaction.
	sqlDeleteSent = `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox
			WHERE sent_at IS NOT NULL AND sent_at < now() - $1::INT8 * INTERVAL '1 millisecond'
			ORDER BY sent_at
			LIMIT $2)`

	sqlStats = `SELECT
			(SELECT count(*) FROM outbox WHERE sent_at IS NULL),
			(SELECT min(created_at) FROM outbox WHERE sent_at IS NULL),
			(SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL),
			now()`

	sqlGet = `SELECT id::TEXT, destination, headers, body, attempts, created_at, sent_at, last_error
		FROM outbox WHERE id = $1::UUID`

	// sqlEmittedBy reads the rows the given events' handlers emitted, in emit order,
	// through outbox_event (migration 0018).
	sqlEmittedBy = `SELECT event_id::TEXT, id::TEXT, destination, headers, body
		FROM outbox WHERE event_id = ANY ($1::UUID[])
		ORDER BY event_id, seq`
)

// Statements returns every statement that runs on both databases, by name, for tests
// that check them against CockroachDB's parser.
func Statements() map[string]string {
	return map[string]string{
		"insert": sqlInsert, "pickHeads": sqlPickHeads, "lockHeads": sqlLockHeads, "leaseClaim": sqlLeaseClaim,
		"settle": sqlSettle, "deleteSent": sqlDeleteSent, "stats": sqlStats, "get": sqlGet, "unsent": sqlUnsent,
		"emittedBy": sqlEmittedBy,
	}
}

// ErrInvalid is wrapped by every error Emit returns for a message it refuses.
var ErrInvalid = errors.New("invalid outgoing message")

// ErrDuplicateID is returned by Emit for an ID already in the outbox. The transaction
// stays usable.
var ErrDuplicateID = errors.New("outbox id already used")

// Outgoing is a message to publish once the transaction commits: inboxd.Outgoing,
// documented there (where users read it), which converts to it field for field.
type Outgoing struct {
	Destination string
	Body        []byte
	Headers     map[string]string
	ID          string // empty: a new random UUID
	Group       string // empty: the JMSXGroupID header, else the aggregate-id header
}

// group is the ordering key of o (see Outgoing.Group); "" means none.
func (o Outgoing) group() string {
	if o.Group != "" {
		return o.Group
	}
	if g := o.Headers["JMSXGroupID"]; g != "" {
		return g
	}
	return o.Headers["aggregate-id"]
}

var headerNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// reserved headers are set by the relay or the STOMP layer, never by the emitter.
var reserved = map[string]bool{
	"destination": true, "receipt": true, "persistent": true, "content-length": true,
	"transaction": true, "message-id": true, HeaderOutboxID: true,
}

// Validate checks o and returns its canonical id (a new one when o.ID is empty).
func (o Outgoing) Validate() (string, error) {
	if err := message.CheckDestination(o.Destination); err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err) // the rule re-inject uses too
	}
	if len(o.Body) > MaxBodyBytes {
		return "", fmt.Errorf("%w: body of %d bytes exceeds %d", ErrInvalid, len(o.Body), MaxBodyBytes)
	}
	if len(o.Headers) > MaxHeaders {
		return "", fmt.Errorf("%w: %d headers, at most %d", ErrInvalid, len(o.Headers), MaxHeaders)
	}
	for k, v := range o.Headers {
		switch {
		case len(k) == 0 || len(k) > MaxHeaderNameLen || !headerNameRE.MatchString(k):
			return "", fmt.Errorf("%w: header name %q must be 1 to %d letters, digits or _.-", ErrInvalid, message.Truncate(k, 80), MaxHeaderNameLen)
		case reserved[k]:
			return "", fmt.Errorf("%w: header %q is set by inboxd", ErrInvalid, k)
		case len(v) > MaxHeaderValueLen || !utf8.ValidString(v) || containsNUL(v):
			return "", fmt.Errorf("%w: header %q must be valid UTF-8 without NUL, at most %d bytes", ErrInvalid, k, MaxHeaderValueLen)
		}
	}
	if len(o.Group) > MaxHeaderValueLen || !utf8.ValidString(o.Group) || containsNUL(o.Group) {
		return "", fmt.Errorf("%w: group must be valid UTF-8 without NUL, at most %d bytes", ErrInvalid, MaxHeaderValueLen)
	}
	if o.ID == "" {
		return message.NewID(), nil
	}
	id, ok := message.CanonicalUUID(o.ID)
	if !ok {
		return "", fmt.Errorf("%w: id %q is not a UUID", ErrInvalid, message.Truncate(o.ID, 80))
	}
	return id, nil
}

// DerivedID returns a name-based UUID (version 5 layout, SHA-1) for parts: the same
// parts give the same id, so a handler that runs again emits the same message id, and
// Emit reports ErrDuplicateID instead of writing a second row.
func DerivedID(parts ...string) string {
	h := sha1.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = (b[6] & 0x0f) | 0x50
	b[8] = (b[8] & 0x3f) | 0x80
	x := hex.EncodeToString(b[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// Emit writes o to the outbox in tx and returns its id. The message is published after
// tx commits, and never if it rolls back; messages of one group (Outgoing.Group) in emit
// order. Invalid input wraps ErrInvalid, an id already used ErrDuplicateID; neither
// breaks tx. A handler that emits several messages should call EmitBatch: one round
// trip for all of them.
func Emit(ctx context.Context, tx pgx.Tx, o Outgoing) (string, error) {
	out, err := EmitBatch(ctx, tx, []Outgoing{o})
	if err != nil {
		var inv *InvalidError
		if errors.As(err, &inv) {
			return "", inv.Err
		}
		return "", err
	}
	if out[0].Duplicate {
		return out[0].ID, fmt.Errorf("%w: %s", ErrDuplicateID, out[0].ID)
	}
	return out[0].ID, nil
}

// Emitted is what EmitBatch did with one message.
type Emitted struct {
	ID string
	// Duplicate tells that ID was already in the outbox (or earlier in the same batch),
	// so nothing was written for it: a handler that runs again emits nothing new.
	Duplicate bool
}

// InvalidError is EmitBatch's error for a message it refuses: Index is its place in
// the batch, Err wraps ErrInvalid. Nothing of the batch is written.
type InvalidError struct {
	Index int
	Err   error
}

func (e *InvalidError) Error() string { return fmt.Sprintf("outgoing message %d: %v", e.Index, e.Err) }
func (e *InvalidError) Unwrap() error { return e.Err }

// EmitBatch writes msgs to the outbox in tx, in their order, and returns what it did
// with each: one statement (and, on PostgreSQL, the relay's wake-up in the same round
// trip) for the whole batch, split only past sqlbound.DefaultMaxStatementBytes. Messages of one group
// are published in the order of msgs, after those the transaction emitted before.
// An invalid message fails the call with an *InvalidError before anything is written;
// an id already used is reported as Duplicate, not as an error.
//
// Inside a handler (eventctx.From), each row records the event that emitted it. In a
// shadow run (eventctx.SinkFrom) the messages go to the run's sink, not the outbox.
func EmitBatch(ctx context.Context, tx pgx.Tx, msgs []Outgoing) ([]Emitted, error) {
	var eventID *string
	replayRun := ""
	if ev, ok := eventctx.From(ctx); ok && ev.ID != "" {
		eventID = &ev.ID
		if ev.Mode == eventctx.Replay {
			replayRun = ev.Run
		}
	}
	sink := eventctx.SinkFrom(ctx)
	out := make([]Emitted, len(msgs))
	ids := make([]string, len(msgs))
	dests := make([]string, len(msgs))
	headers := make([]string, len(msgs))
	bodies := make([][]byte, len(msgs))
	groups := make([]*string, len(msgs))
	sizes := make([]int, len(msgs))
	first := make(map[string]bool, len(msgs))
	for i, o := range msgs {
		id, err := o.Validate()
		if err != nil {
			return nil, &InvalidError{Index: i, Err: err}
		}
		if replayRun != "" {
			// A replay publishes messages of its own: the id the handler chose (derived
			// from the event, say, as the first run's was) is derived again with the run,
			// so that neither the outbox nor a downstream inbox drops them as duplicates of
			// the first run's, while a rerun of the same run still gives the same ids.
			id = DerivedID(id, "replay", replayRun)
		}
		out[i].ID = id
		if first[id] {
			out[i].Duplicate = true // the first one of the batch is written
			continue
		}
		first[id] = true
		// The traceparent of the processing that emits it (tracing.Inject), after Validate:
		// the emitter's own traceparent header, if any, is kept.
		h := tracing.Inject(ctx, o.Headers)
		if h == nil {
			h = map[string]string{}
		}
		hj, err := json.Marshal(h)
		if err != nil {
			return nil, fmt.Errorf("encoding outbox headers: %w", err)
		}
		ids[i], dests[i], headers[i], bodies[i] = id, o.Destination, string(hj), o.Body
		if bodies[i] == nil {
			bodies[i] = []byte{}
		}
		if sink != nil {
			sink.Add(eventctx.Message{ID: id, Destination: o.Destination, Headers: h, Body: bodies[i]})
		}
		if g := o.group(); g != "" {
			groups[i] = &g
		}
		sizes[i] = sqlbound.Value(len(id)) + sqlbound.Value(len(o.Destination)) + sqlbound.Value(len(hj)) +
			sqlbound.Value(len(o.Body)) + sqlbound.Value(len(o.group()))
	}
	if sink != nil {
		// A shadow run writes nothing: the relay must never see its messages, and an id
		// the first run wrote is no duplicate for the run it imitates.
		return out, nil
	}
	var todo []int // the messages to write, in order
	for i := range out {
		if !out[i].Duplicate {
			todo = append(todo, i)
		}
	}
	// Statements under sqlbound's bound (CockroachDB refuses a client message over
	// 16 MiB) and of at most SeqBlock rows, in order: each draws a later sequence block.
	runs := sqlbound.Split(todo, sqlbound.Size(sqlInsert), sqlbound.DefaultMaxStatementBytes, func(i int) int { return sizes[i] })
	// NOTIFY where the database has LISTEN, by the Dialect of the transaction's connection:
	// a handler passes nothing else.
	notify := database.DialectOf(tx.Conn()).Listen()
	for len(runs) > 0 {
		run := runs[0]
		if len(run) > SeqBlock {
			runs[0], run = run[SeqBlock:], run[:SeqBlock]
		} else {
			runs = runs[1:]
		}
		ci, cd, ch, cb, cg, ce := make([]string, len(run)), make([]string, len(run)), make([]string, len(run)), make([][]byte, len(run)), make([]*string, len(run)), make([]*string, len(run))
		for k, i := range run {
			ci[k], cd[k], ch[k], cb[k], cg[k], ce[k] = ids[i], dests[i], headers[i], bodies[i], groups[i], eventID
		}
		var inserted []string
		var err error
		if notify {
			inserted, err = insertRows(ctx, tx, pgOnlyInsert, ci, cd, ch, cb, cg, ce)
		} else {
			inserted, err = insertRows(ctx, tx, sqlInsert, ci, cd, ch, cb, cg, ce)
		}
		if err != nil {
			return nil, err
		}
		written := make(map[string]bool, len(inserted))
		for _, id := range inserted {
			written[id] = true
		}
		for _, i := range run {
			out[i].Duplicate = !written[out[i].ID] // already in the outbox
		}
	}
	return out, nil
}

// insertRows runs one insert statement (sqlInsert or pgOnlyInsert) and returns the ids
// it wrote.
func insertRows(ctx context.Context, tx pgx.Tx, sql string, ids, dests, headers []string, bodies [][]byte, groups, events []*string) ([]string, error) {
	var inserted []string
	var notified string
	if err := tx.QueryRow(ctx, sql, ids, dests, headers, bodies, groups, events).Scan(&inserted, &notified); err != nil {
		return nil, fmt.Errorf("writing %d outbox rows: %w", len(ids), err)
	}
	return inserted, nil
}

// Row is an outbox row.
type Row struct {
	ID          string
	Destination string
	Headers     map[string]string
	Body        []byte
	Attempts    int64
	CreatedAt   time.Time
	SentAt      *time.Time
	LastError   *string
}

// Get returns one row; found is false when there is none.
func Get(ctx context.Context, db database.DB, id string) (Row, bool, error) {
	var r Row
	var hj []byte
	err := db.QueryRow(ctx, sqlGet, id).Scan(&r.ID, &r.Destination, &hj, &r.Body, &r.Attempts, &r.CreatedAt, &r.SentAt, &r.LastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, false, nil
	}
	if err != nil {
		return Row{}, false, fmt.Errorf("reading outbox row %s: %w", id, err)
	}
	if err := json.Unmarshal(hj, &r.Headers); err != nil {
		return Row{}, false, fmt.Errorf("decoding outbox row %s headers: %w", id, err)
	}
	return r, true, nil
}

// Stats describes the outbox.
type Stats struct {
	Unsent       int64
	Sent         int64 // still retained
	OldestUnsent *time.Time
	Now          time.Time // the database's clock, to compute ages with
}

// OldestUnsentAge is how long the oldest unsent row has waited; 0 when none.
func (s Stats) OldestUnsentAge() time.Duration {
	if s.OldestUnsent == nil {
		return 0
	}
	return max(0, s.Now.Sub(*s.OldestUnsent))
}

// ReadStats reads the outbox's depth and the age of its oldest unsent row.
func ReadStats(ctx context.Context, db database.DB) (Stats, error) {
	var s Stats
	if err := db.QueryRow(ctx, sqlStats).Scan(&s.Unsent, &s.OldestUnsent, &s.Sent, &s.Now); err != nil {
		return Stats{}, fmt.Errorf("reading outbox stats: %w", err)
	}
	return s, nil
}

// Message is a message an event's handler emitted, as EmittedBy reads it back.
type Message struct {
	ID          string
	Destination string
	Headers     map[string]string
	Body        []byte
}

// EmittedBy returns, by event id and in emit order, the outbox rows the handlers of
// eventIDs emitted and the outbox still holds. An event without rows is absent: it
// emitted nothing, its rows were deleted by retention, or they were emitted before the
// outbox recorded events (or by a set-based call); the caller cannot tell which.
func EmittedBy(ctx context.Context, db database.DB, eventIDs []string) (map[string][]Message, error) {
	out := map[string][]Message{}
	if len(eventIDs) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, sqlEmittedBy, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox rows of %d events: %w", len(eventIDs), err)
	}
	defer rows.Close()
	for rows.Next() {
		var ev string
		var m Message
		var hj []byte
		if err := rows.Scan(&ev, &m.ID, &m.Destination, &hj, &m.Body); err != nil {
			return nil, fmt.Errorf("reading the outbox rows of %d events: %w", len(eventIDs), err)
		}
		if err := json.Unmarshal(hj, &m.Headers); err != nil {
			return nil, fmt.Errorf("decoding outbox row %s headers: %w", m.ID, err)
		}
		out[ev] = append(out[ev], m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading the outbox rows of %d events: %w", len(eventIDs), err)
	}
	return out, nil
}
