package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/cockroach-go/v2/crdb"
	"github.com/cockroachdb/cockroach-go/v2/crdb/crdbpgxv5"
	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// Aggregate heads (table aggregate_head, migration 0007).
//
// Every aggregate with pending work has one row: its head, the earliest entry still
// RECEIVED or FAILED, or a DEAD entry not skipped, which parks the aggregate; and when
// that head is due. Claims find due heads through the row's own index
// (aggregate_head_due), so their cost follows the due work: events waiting behind a
// head that is not due or is parked, and settled entries, are never read.
//
// The rows are kept in the transactions that change what an aggregate's head is:
//   - ingest (ingestSQL) inserts the row of an aggregate that has none, or moves it to
//     an entry with a lower sequence number, with INSERT … ON CONFLICT DO UPDATE, which
//     PostgreSQL applies to the row's latest version even under READ COMMITTED;
//   - settling (SyncHeads: processing outcomes, timeouts, retries, skips) first locks the
//     aggregates' rows, then recomputes them from journal_state in a later statement.
//
// Together they cannot lose a head. Ingest's upsert locks the row too: if settling
// locked it first, ingest waits for its commit and then updates (or re-inserts) the row
// settling left; if ingest locked it first, settling waits for ingest's commit, and the
// statement that recomputes the row, taken after that, sees ingest's entries. Both lock
// rows in aggregate_id order, so they cannot deadlock. Ingest never waits for a handler:
// a claim locks journal_state rows, never aggregate_head rows, and settling holds the head
// rows only from SyncHeads to its commit. Under SERIALIZABLE (CockroachDB) the same
// interleavings end in a retryable 40001 instead.

// pickDueSQL picks due heads without locking anything: the oldest due first, FAILED
// heads whose retry has come and RECEIVED heads older than the grace ($1 ms), each
// through its own range of aggregate_head_due. The locking happens by key in lockHeadsSQL:
// under SKIP LOCKED, CockroachDB does not push a LIMIT below a locking index join, so a
// locking statement with a LIMIT can lock far more rows than it returns
// (https://github.com/cockroachdb/cockroach/issues/121917,
// https://github.com/cockroachdb/cockroach/issues/143017).
const pickDueSQL = `
SELECT d.head_id::TEXT FROM ` + dueHeadsSQL + ` AS d
ORDER BY d.due_at LIMIT $2::INT8`

// dueHeadsSQL is the due heads, at most $2 of each kind (FAILED and RECEIVED, $1 the
// grace in ms), with their due times: the rows pickDueSQL and claimDueSQL pick from.
const dueHeadsSQL = `(
	(SELECT h.head_id, h.due_at FROM aggregate_head AS h
	 WHERE NOT h.parked AND NOT h.received AND h.due_at <= now() AND ` + notHeld + `
	 ORDER BY h.due_at LIMIT $2::INT8)
	UNION ALL
	(SELECT h.head_id, h.due_at FROM aggregate_head AS h
	 WHERE NOT h.parked AND h.received AND h.due_at <= now() - $1::INT8 * INTERVAL '1 millisecond' AND ` + notHeld + `
	 ORDER BY h.due_at LIMIT $2::INT8)
)`

// claimDueSQL picks and locks up to $3 due heads in one statement, skipping rows other
// transactions hold, from the oldest due of up to $2 of each kind ($1 the grace in ms):
// PostgreSQL under READ COMMITTED only (see ClaimDue). PostgreSQL applies the LIMIT
// above the row locking, so rows skipped as locked do not count against it, and locks
// only the state rows it returns (FOR UPDATE OF s): journal_state's, the only rows a
// claim's transaction changes; the entry's immutable columns are read above the lock,
// by key, for the rows it returns only
// (https://www.postgresql.org/docs/15/sql-select.html#SQL-FOR-UPDATE-SHARE). The
// locking sub-select returns the locked rows' columns as they are once locked, and the
// checks and conversions (the payload's text, the head checks' subplans) are computed
// above it, for the rows it returns only: below the lock they ran for every head
// another worker held too, and made the claim cost twice what the pick and the lock
// cost apart. The checks are in the select list, as in lockHeadsSQL, so the journal
// is read by key.
//
// The due heads d are a sub-select with a LIMIT of its own ($2 in all, as pickDueSQL),
// which PostgreSQL cannot flatten: it stays one relation, and a row the lock finds
// changed by a transaction that committed after the statement's snapshot (a head
// another worker settled) is rechecked (READ COMMITTED's EvalPlanQual) against d's row
// as the statement read it. Written as the bare UNION ALL, d was flattened into its two
// branches, which have no row of their own to recheck against: each such recheck ran
// the head scans again (about 800 buffers at 400 heads; e2e-max's claims took up to
// 590 ms), and then dropped the row it had just locked.
// https://www.postgresql.org/docs/15/transaction-iso.html#XACT-READ-COMMITTED
var claimDueSQL = `
		SELECT ` + headColumns + `, false, ` + claimableSQL("$1") + `
		FROM (
			SELECT s.id, s.aggregate_id, s.sequence_no, s.status, s.attempts, s.next_attempt_at
			FROM (SELECT x.head_id, x.due_at FROM ` + dueHeadsSQL + ` AS x
			      ORDER BY x.due_at LIMIT $2::INT8) AS d
			JOIN journal_state AS s ON s.id = d.head_id
			ORDER BY d.due_at LIMIT $3::INT8
			FOR UPDATE OF s SKIP LOCKED) AS s
		CROSS JOIN LATERAL (SELECT j.id, j.event_type, j.aggregate_id, j.sequence_no, j.tag, j.payload, j.trace_context
			FROM journal AS j WHERE j.id = s.id LIMIT 1) AS j`

// notHeld is true when h's aggregate is not under replay (replay_hold, migration 0019):
// a live event of an aggregate a replay run holds waits until the aggregate's replay
// items are done, so that none commits between two of its replayed events; the other
// aggregates flow. It is in the picks' WHERE clauses, before their LIMITs, so that held
// heads do not use up a pick: the heads are still read through aggregate_head_due in
// due order, and replay_hold, which has a row per aggregate of an unfinished run only
// (empty but during a replay), is probed by its key or hashed whole, which costs what
// the held aggregates cost, not the journal. The locks re-check it (lockHeadsSQL,
// lockBatchSQL), since the pick is only a hint. On CockroachDB the pick runs outside
// the processing transaction (PickHeads), so its read of replay_hold adds nothing to
// that transaction's serializable read set. A hold committed after a claim's lock
// statement read replay_hold is met by the replay's own lock of the aggregate's pending
// entries (journal.LockAggregatePending), which waits for the live transaction's row
// lock on its head entry to be released at its commit: SELECT FOR UPDATE's locks are
// held to the end of the transaction and a second locking read of the row waits
// (https://www.cockroachlabs.com/docs/stable/select-for-update).
const notHeld = `NOT EXISTS (SELECT 1 FROM replay_hold AS r WHERE r.aggregate_id = h.aggregate_id)`

// pickAggregatesSQL picks the heads of the given aggregates ($1) that are due and not
// parked, by primary key.
const pickAggregatesSQL = `
SELECT h.head_id::TEXT FROM aggregate_head AS h
WHERE h.aggregate_id = ANY ($1::TEXT[]) AND NOT h.parked AND h.due_at <= now() AND ` + notHeld

// headCheck is true when an entry s (its state row), once locked, is still its aggregate's head:
// nothing earlier pending, no earlier DEAD entry parking the aggregate. The pick ran
// without locks, so another transaction may have settled or moved it meanwhile. It is
// meant for a select list: there each NOT EXISTS stays a subplan run per locked row,
// which probes journal_state_pending and journal_state_parked by (aggregate_id,
// sequence_no); in a WHERE clause PostgreSQL may turn it into an anti-join that reads
// every pending entry (it did, whenever statistics said few were pending).
const headCheck = `NOT EXISTS (
		SELECT 1 FROM journal_state AS p
		WHERE p.aggregate_id = s.aggregate_id AND p.sequence_no < s.sequence_no
		  AND p.status IN ('RECEIVED', 'FAILED'))
	AND NOT EXISTS (
		SELECT 1 FROM journal_state AS p
		WHERE p.aggregate_id = s.aggregate_id AND p.sequence_no < s.sequence_no
		  AND p.status = 'DEAD' AND p.skipped_at IS NULL)`

// lockHeadsSQL locks picked heads ($1) by primary key and tells, in its last column,
// which of them are still claimable: pending, due ($2: the grace of a RECEIVED head, in
// ms) and their aggregate's head. skip: SKIP LOCKED (the sweeper); otherwise a row
// another transaction holds is waited for, in sequence order (successors of a delivery,
// see ClaimHeads).
//
// The WHERE clause is the key alone, and every check is in the select list (as the
// outbox's lock does), so that the plan is a primary-key lookup of the picked ids
// whatever the statistics say, in custom and generic plans alike: with the status and
// due checks in the WHERE clause, an analyzed journal of settled entries made
// PostgreSQL scan journal_pending, however many entries it really held, and filter it
// by id. On PostgreSQL the checks are evaluated again on the row's latest version once
// it is locked (READ COMMITTED's recheck), so a head settled meanwhile reads as not
// claimable. Every row it locks, it returns: it has no LIMIT and no filter but the key,
// so neither database locks a row it was not asked for
// (https://github.com/cockroachdb/cockroach/issues/121917).
// https://www.cockroachlabs.com/docs/stable/select-for-update
//
// It locks the state rows (journal_state), the only rows a claim's transaction changes,
// in a sub-select of that one table, and reads the journal by key above it: CockroachDB
// did not lock the rows a locking SELECT reads through a lookup join
// (https://github.com/cockroachdb/cockroach/issues/88262), so the locked table is
// scanned by its own key, whichever join the planner picks.
func lockHeadsSQL(skip bool) string {
	order := `ORDER BY s.sequence_no FOR UPDATE`
	if skip {
		order = `FOR UPDATE SKIP LOCKED`
	}
	return `
		SELECT ` + headColumns + `, false, ` + claimableSQL("$2") + `
		FROM (
			SELECT s.id, s.aggregate_id, s.sequence_no, s.status, s.attempts, s.next_attempt_at
			FROM journal_state AS s
			WHERE s.id = ANY ($1::UUID[])
			` + order + `) AS s
		JOIN journal AS j ON j.id = s.id
		ORDER BY s.sequence_no`
}

// claimableSQL is true when a locked entry s can be claimed: pending, due (grace: the
// parameter holding a RECEIVED entry's grace, in ms), its aggregate's head, and not held
// by a replay.
func claimableSQL(grace string) string {
	return `s.status IN ('RECEIVED', 'FAILED') AND s.next_attempt_at <= now()
		       AND (s.status = 'FAILED' OR s.next_attempt_at <= now() - ` + grace + `::INT8 * INTERVAL '1 millisecond')
		       AND ` + headCheck + `
		       AND NOT EXISTS (SELECT 1 FROM replay_hold AS r WHERE r.aggregate_id = s.aggregate_id)`
}

// maxLockChunks bounds the lock statements of one claim: past it, the batch runs with
// what it locked. When other workers hold most of the pick, the chunks after the first
// ask for the few heads still missing, each mostly held too: e2e-max's two workers sent
// up to 55 of them in one transaction, each a round trip with the batch's locks held.
const maxLockChunks = 4

// pickSpread is how many times limit PickHeads picks: the locks then go past heads other
// workers hold, a chunk at a time, without picking again.
const pickSpread = 4

// PickHeads picks, without locking anything, the due heads a claim of up to limit
// entries tries: the oldest due first, up to pickSpread × limit of them, FAILED heads
// whose retry has come and RECEIVED heads older than grace; or, when aggregates is not
// nil, the heads of those aggregates that are due, at most limit of them (in no
// particular order: a caller with more aggregates than limit passes them a limit at a
// time, or some are left out). Run it outside the processing
// transaction, on the pool, before that transaction begins: under SERIALIZABLE
// (CockroachDB's default) a range read of aggregate_head_due inside it would conflict with
// every transaction moving a head in that range and restart it; outside, the processing
// transaction reads only the keys it locks and the aggregates it settles. (Before it
// begins, too, or a transaction would hold one connection while waiting for another.)
// The pick is only a hint: LockPicked re-checks everything.
func PickHeads(ctx context.Context, db database.DB, grace time.Duration, limit int, aggregates []string) ([]string, error) {
	if limit <= 0 {
		return nil, nil
	}
	if aggregates != nil {
		ids, err := pickIDs(ctx, db, pickAggregatesSQL, aggregates)
		if len(ids) > limit {
			ids = ids[:limit]
		}
		return ids, err
	}
	return pickIDs(ctx, db, pickDueSQL, grace.Milliseconds(), limit*pickSpread)
}

// LockPicked locks, for the rest of tx, up to limit of the picked heads (PickHeads)
// that are still due heads of their aggregates. skip: rows other transactions hold are
// skipped (SKIP LOCKED), and the next picked ones are tried, a chunk at a time, until
// limit are locked, the pick is used up or maxLockChunks chunks were sent; otherwise
// (the successors of a delivery, see ClaimHeads) they are waited for, in sequence
// order. It never locks a row it was not asked for, and it asks for no more than it
// still needs.
func LockPicked(ctx context.Context, tx database.DB, picked []string, grace time.Duration, limit int, skip bool) ([]Head, error) {
	return LockPickedOpening(ctx, tx, picked, grace, limit, skip, "")
}

// LockPickedOpening is LockPicked, then opens the savepoint named savepoint ("": none)
// in the round trip of each lock (see lockOpening). The locks of a chunk after the first
// are taken inside the savepoint the chunk before opened, and a new one is opened after
// them: ROLLBACK TO SAVEPOINT goes back to the latest savepoint of that name, so those
// locks are never rolled back, and no RELEASE is needed
// (https://www.postgresql.org/docs/15/sql-rollback-to.html,
// https://www.cockroachlabs.com/docs/stable/savepoint#savepoint-name-visibility).
func LockPickedOpening(ctx context.Context, tx database.DB, picked []string, grace time.Duration, limit int, skip bool, savepoint string) ([]Head, error) {
	var out []Head
	for chunks := 0; len(picked) > 0 && len(out) < limit && chunks < maxLockChunks; chunks++ {
		n := min(limit-len(out), len(picked))
		got, err := lockOpening(ctx, tx, "claiming due journal entries", savepoint, lockHeadsSQL(skip), picked[:n], grace.Milliseconds())
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		picked = picked[n:]
		if !skip {
			break
		}
	}
	return out, nil
}

// ClaimDue picks and locks, for the rest of tx, up to limit due heads in one statement
// (claimDueSQL), skipping rows other transactions hold, then opens the savepoint named
// savepoint ("": none) in the same round trip: the sweep's claim of PickHeads then
// LockPicked in one round trip, however many of the due heads other workers hold.
//
// Only for a transaction under READ COMMITTED on PostgreSQL. There a locked row whose
// head moved meanwhile is re-read at its latest version and reads as not claimable.
// Under SERIALIZABLE, its read of aggregate_head_due's range inside the transaction
// would conflict with every transaction moving a head in that range; and CockroachDB,
// whose transactions are SERIALIZABLE, may lock more rows than a locking statement
// with a LIMIT returns (https://github.com/cockroachdb/cockroach/issues/121917), so
// there a sweep picks on the pool first (PickHeads).
func ClaimDue(ctx context.Context, tx database.DB, grace time.Duration, limit int, savepoint string) ([]Head, error) {
	if limit <= 0 {
		return nil, nil
	}
	return lockOpening(ctx, tx, "claiming due journal entries", savepoint, claimDueSQL,
		grace.Milliseconds(), limit*pickSpread, limit)
}

// ClaimHeads locks, for the rest of tx, up to limit entries that are due and are the
// head of their aggregate: FAILED entries whose next attempt has come, and RECEIVED
// entries older than grace. Rows another transaction holds are skipped (SKIP LOCKED),
// so concurrent batches, in this instance or another, never wait for one another and
// never take the same entry. The lock is the claim: it ends with tx, so a dead worker's
// entries are free again at once. It is PickHeads on picker then LockPicked in tx; the
// engine calls the two itself, picking before its transaction begins.
//
// aggregates, when not nil, restricts the claim to those aggregates (the successors of
// a delivery just processed), and then a row another transaction holds is waited for,
// in sequence order: that transaction may be a delivery that is deferring the very
// successor this claim is meant to move on, and skipping it would strand it.
func ClaimHeads(ctx context.Context, picker, tx database.DB, grace time.Duration, limit int, aggregates []string) ([]Head, error) {
	picked, err := PickHeads(ctx, picker, grace, limit, aggregates)
	if err != nil {
		return nil, err
	}
	return LockPicked(ctx, tx, picked, grace, limit, aggregates == nil)
}

func pickIDs(ctx context.Context, tx database.DB, sql string, args ...any) ([]string, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("picking due aggregate heads: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("picking due aggregate heads: %w", err)
	}
	return ids, nil
}

// lockAggregateHeadsSQL is SyncHeads' first statement: it makes ingest wait for this
// transaction before it touches these aggregates' rows (see the package comment above).
const lockAggregateHeadsSQL = `
SELECT h.aggregate_id FROM aggregate_head AS h
WHERE h.aggregate_id = ANY ($1::TEXT[])
ORDER BY h.aggregate_id
FOR UPDATE`

// upsertHeadsSQL recomputes the rows of aggregates $1 from the journal: the earliest
// pending entry, unless a DEAD entry not skipped comes before it, which parks the
// aggregate. Aggregates with neither are left to deleteIdleHeadsSQL (CockroachDB
// refuses two mutations of one table in one statement).
const upsertHeadsSQL = `
WITH a AS (
	SELECT DISTINCT x.aggregate_id FROM unnest($1::TEXT[]) AS x(aggregate_id)
),
c AS (
	SELECT a.aggregate_id, p.id AS pid, p.sequence_no AS pseq, p.next_attempt_at AS pdue, p.status AS pstatus,
	       d.id AS did, d.sequence_no AS dseq, d.next_attempt_at AS ddue
	FROM a
	LEFT JOIN LATERAL (
		SELECT j.id, j.sequence_no, j.next_attempt_at, j.status FROM journal_state AS j
		WHERE j.aggregate_id = a.aggregate_id AND j.status IN ('RECEIVED', 'FAILED')
		ORDER BY j.sequence_no LIMIT 1) AS p ON true
	LEFT JOIN LATERAL (
		SELECT j.id, j.sequence_no, j.next_attempt_at FROM journal_state AS j
		WHERE j.aggregate_id = a.aggregate_id AND j.status = 'DEAD' AND j.skipped_at IS NULL
		ORDER BY j.sequence_no LIMIT 1) AS d ON true
	WHERE p.id IS NOT NULL OR d.id IS NOT NULL
),
n AS (
	SELECT c.*, (c.did IS NOT NULL AND (c.pid IS NULL OR c.dseq < c.pseq)) AS parked
	FROM c
)
` + writeHeadsSQL

// writeHeadsSQL writes each aggregate's row from n (its earliest pending entry pid and
// DEAD entry did, and whether the DEAD one parks it): the one write of aggregate_head
// rows, shared by upsertHeadsSQL and the settle (settleSQL).
const writeHeadsSQL = `INSERT INTO aggregate_head (aggregate_id, head_id, head_seq, due_at, received, parked)
SELECT n.aggregate_id,
       CASE WHEN n.parked THEN n.did ELSE n.pid END,
       CASE WHEN n.parked THEN n.dseq ELSE n.pseq END,
       CASE WHEN n.parked THEN n.ddue ELSE n.pdue END,
       NOT n.parked AND n.pstatus = 'RECEIVED',
       n.parked
FROM n
ORDER BY n.aggregate_id
ON CONFLICT (aggregate_id) DO UPDATE SET head_id = excluded.head_id, head_seq = excluded.head_seq,
    due_at = excluded.due_at, received = excluded.received, parked = excluded.parked
RETURNING aggregate_id, parked`

// deleteIdleHeadsSQL deletes the rows of aggregates $1 left with no pending entry and no
// parking DEAD entry. Each aggregate is probed by a LATERAL … LIMIT 1 through
// journal_state_pending and journal_state_parked, as in upsertHeadsSQL: written
// as NOT EXISTS, PostgreSQL planned a hash anti-join over every pending and every DEAD
// entry whenever statistics said there were few.
// https://www.cockroachlabs.com/docs/stable/subqueries#lateral-subqueries
const deleteIdleHeadsSQL = `
DELETE FROM aggregate_head AS h
WHERE h.aggregate_id IN (
	SELECT a.aggregate_id FROM unnest($1::TEXT[]) AS a(aggregate_id)
	LEFT JOIN LATERAL (
		SELECT j.id FROM journal_state AS j
		WHERE j.aggregate_id = a.aggregate_id AND j.status IN ('RECEIVED', 'FAILED')
		ORDER BY j.sequence_no LIMIT 1) AS p ON true
	LEFT JOIN LATERAL (
		SELECT j.id FROM journal_state AS j
		WHERE j.aggregate_id = a.aggregate_id AND j.status = 'DEAD' AND j.skipped_at IS NULL
		ORDER BY j.sequence_no LIMIT 1) AS d ON true
	WHERE p.id IS NULL AND d.id IS NULL)`

// SyncHeads brings the aggregate_head rows of aggregates up to date with the journal,
// inside tx, after tx changed the status of some of their entries (or their
// next_attempt_at): it must run in the same transaction, after those changes.
func SyncHeads(ctx context.Context, tx database.DB, aggregates []string) error {
	_, err := SettleHeads(ctx, tx, aggregates)
	return err
}

// SettleHeads is SyncHeads, and it returns which of the aggregates still have a head
// that is not parked: the only ones whose next event there can be to move on once tx
// commits. (One journaled after this statement read the journal is not among them; its
// ingest waits for tx's locks, then puts it in aggregate_head, due, and kicks the
// workers or reaches the changefeed itself.) Processing uses it to skip looking for
// the successors of aggregates that have none, which is most of them.
func SettleHeads(ctx context.Context, tx database.DB, aggregates []string) (map[string]bool, error) {
	if len(aggregates) == 0 {
		return nil, nil
	}
	aggs := slices.Clone(aggregates)
	slices.Sort(aggs)
	aggs = slices.Compact(aggs)
	next := map[string]bool{}
	var (
		agg    string
		parked bool
	)
	readHeads := func(rows pgx.Rows) error {
		_, err := pgx.ForEachRow(rows, []any{&agg, &parked}, func() error {
			if !parked {
				next[agg] = true
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("updating %d aggregate heads: %w", len(aggs), err)
		}
		return nil
	}
	if b, ok := tx.(batchSender); ok {
		// One round trip for the three statements: they run in order on the server, so
		// the lock is taken before the recomputation reads the journal. It is most of a
		// small batch's round trips at a moderate rate.
		batch := &pgx.Batch{}
		batch.Queue(lockAggregateHeadsSQL, aggs)
		batch.Queue(upsertHeadsSQL, aggs)
		batch.Queue(deleteIdleHeadsSQL, aggs)
		br := b.SendBatch(ctx, batch)
		err := func() error {
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("locking %d aggregate heads: %w", len(aggs), err)
			}
			rows, err := br.Query()
			if err != nil {
				return fmt.Errorf("updating %d aggregate heads: %w", len(aggs), err)
			}
			if err := readHeads(rows); err != nil {
				return err
			}
			if _, err := br.Exec(); err != nil {
				return fmt.Errorf("deleting idle aggregate heads: %w", err)
			}
			return nil
		}()
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("settling %d aggregate heads: %w", len(aggs), cerr)
		}
		if err != nil {
			return nil, err
		}
		return next, nil
	}
	if _, err := tx.Exec(ctx, lockAggregateHeadsSQL, aggs); err != nil {
		return nil, fmt.Errorf("locking %d aggregate heads: %w", len(aggs), err)
	}
	rows, err := tx.Query(ctx, upsertHeadsSQL, aggs)
	if err != nil {
		return nil, fmt.Errorf("updating %d aggregate heads: %w", len(aggs), err)
	}
	if err := readHeads(rows); err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, deleteIdleHeadsSQL, aggs); err != nil {
		return nil, fmt.Errorf("deleting idle aggregate heads: %w", err)
	}
	return next, nil
}

// batchSender is what a pgx.Tx (or connection) has to send statements in one round trip.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// aggregatesOfSQL returns the distinct aggregates of entries $1.
const aggregatesOfSQL = `SELECT DISTINCT aggregate_id FROM journal_state WHERE id = ANY ($1::UUID[])`

// SyncHeadsOf is SyncHeads for the aggregates of the entries ids.
func SyncHeadsOf(ctx context.Context, tx database.DB, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, aggregatesOfSQL, ids)
	if err != nil {
		return fmt.Errorf("reading aggregates of %d entries: %w", len(ids), err)
	}
	aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("reading aggregates of %d entries: %w", len(ids), err)
	}
	return SyncHeads(ctx, tx, aggs)
}

// rebuildHeadsSQL inserts the row of every aggregate with pending work that has none
// (migration 0007 runs the same backfill). It reads every pending entry: for repairs and
// tests that write the journal directly, never on a routine path.
const rebuildHeadsSQL = `
INSERT INTO aggregate_head (aggregate_id, head_id, head_seq, due_at, received)
SELECT DISTINCT ON (j.aggregate_id) j.aggregate_id, j.id, j.sequence_no, j.next_attempt_at, j.status = 'RECEIVED'
FROM journal_state AS j
WHERE j.status IN ('RECEIVED', 'FAILED')
ORDER BY j.aggregate_id, j.sequence_no
ON CONFLICT (aggregate_id) DO NOTHING`

// RebuildHeads recomputes every aggregate_head row from the journal: for a journal
// written behind inboxd's back (tests, repairs). It reads every pending entry.
func RebuildHeads(ctx context.Context, db database.DB) error {
	return inTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, rebuildHeadsSQL); err != nil {
			return fmt.Errorf("rebuilding aggregate heads: %w", err)
		}
		rows, err := tx.Query(ctx, `SELECT aggregate_id FROM aggregate_head`)
		if err != nil {
			return fmt.Errorf("rebuilding aggregate heads: %w", err)
		}
		aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("rebuilding aggregate heads: %w", err)
		}
		return SyncHeads(ctx, tx, aggs)
	})
}

// inTx runs fn in one transaction on db. On a pool (db has BeginTx) a serialization
// conflict (40001, CockroachDB's default SERIALIZABLE; PostgreSQL's SERIALIZABLE too)
// is retried as processing retries it, with ExecuteTx: operator actions must
// not fail on a conflict the database asks the client to retry
// (https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference). On
// PostgreSQL a retry under the savepoint keeps the transaction's snapshot and a
// conflict reported at COMMIT ends it, so up to operatorTxAttempts whole transactions
// are tried. On a transaction (db has no BeginTx) fn runs under a savepoint, once: a
// conflict is the outer transaction's to retry.
func inTx(ctx context.Context, db database.DB, fn func(pgx.Tx) error) error {
	if c, ok := db.(crdbpgx.Conn); ok {
		var err error
		for range operatorTxAttempts {
			// Zero options: a SerializablePool (CockroachDB) fills in SERIALIZABLE.
			if err = ExecuteTx(ctx, c, pgx.TxOptions{}, fn); !isSerializationFailure(err) {
				return err
			}
		}
		return err
	}
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing: %w", err)
	}
	return nil
}

// ExecuteTx is crdbpgx.ExecuteTx with one difference: a failed COMMIT is reported.
//
// crdb.ExecuteInTx commits with RELEASE SAVEPOINT cockroach_restart and ignores the
// error of the COMMIT that follows, which is right on CockroachDB (RELEASE of that
// savepoint is the commit) but not on PostgreSQL, where RELEASE is an ordinary
// savepoint release and COMMIT is the commit: a connection lost at that moment would be
// reported as success, and the webhook would answer 2xx for an outcome never recorded.
// Reporting it costs CockroachDB nothing worse than a redelivery, which is a no-op.
func ExecuteTx(ctx context.Context, db crdbpgx.Conn, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", err)
	}
	a := &commitCheckingTx{tx: tx}
	if err := crdb.ExecuteInTx(ctx, a, func() error { return fn(tx) }); err != nil {
		return err
	}
	if a.commitErr != nil {
		return fmt.Errorf("committing: %w", a.commitErr)
	}
	return nil
}

type commitCheckingTx struct {
	tx        pgx.Tx
	commitErr error
}

func (t *commitCheckingTx) Exec(ctx context.Context, sql string, args ...any) error {
	_, err := t.tx.Exec(ctx, sql, args...)
	return err
}

func (t *commitCheckingTx) Commit(ctx context.Context) error {
	t.commitErr = t.tx.Commit(ctx)
	return t.commitErr
}

func (t *commitCheckingTx) Rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }

// operatorTxAttempts bounds the whole-transaction retries of inTx.
const operatorTxAttempts = 5

// isSerializationFailure reports 40001 (CockroachDB's transaction retry error,
// PostgreSQL's serialization_failure), also when crdb wrapped it.
func isSerializationFailure(err error) bool {
	var e interface{ SQLState() string }
	return errors.As(err, &e) && e.SQLState() == "40001"
}

// RunOnSkipper is skipped_by for a DEAD entry whose event type lets successors run on
// past it (process.Registry.RunOnDead).
const RunOnSkipper = "inboxd: event type runs on past DEAD"

// ErrNotSkippable is returned by Skip for an entry that is not DEAD, or already skipped.
var ErrNotSkippable = errors.New("entry is not DEAD, or already skipped")

// Skip records that by skipped the DEAD entry id, now: it no longer parks its aggregate,
// whose successors run on. It returns the entry as it is afterwards; for an entry that
// is not DEAD or was skipped already, the entry and ErrNotSkippable.
func Skip(ctx context.Context, db database.DB, id, by string) (Record, error) {
	var r Record
	err := inTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		r, err = scanRecord(tx.QueryRow(ctx, `WITH s AS (
			UPDATE journal_state SET skipped_by = $2::TEXT, skipped_at = now(), updated_at = now()
			WHERE id = $1::UUID AND status = 'DEAD' AND skipped_at IS NULL
			RETURNING *)
			SELECT `+recordColumns+` FROM s JOIN journal AS j ON j.id = s.id`, id, by))
		if err != nil {
			return err
		}
		return SyncHeads(ctx, tx, []string{r.AggregateID})
	})
	if err == nil {
		return r, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("skipping journal entry %s: %w", id, err)
	}
	r, err = Get(ctx, db, id)
	if err != nil {
		return Record{}, err
	}
	return r, ErrNotSkippable
}

// parkedSQL counts the parked aggregates and the entries waiting behind them: per
// parked aggregate (aggregate_head_parked), its pending entries through
// journal_state_pending. As a plain join, PostgreSQL hash-joined a scan of the
// journal, every second (the sweeper refreshes the gauges), with no aggregate parked:
// 3,000 blocks a call on a 60,000-entry journal.
const parkedSQL = `
SELECT (SELECT count(*) FROM aggregate_head WHERE parked),
       (SELECT coalesce(sum(w.n), 0) FROM aggregate_head AS h
        CROSS JOIN LATERAL (
        	SELECT count(*) AS n FROM journal_state AS j
        	WHERE j.aggregate_id = h.aggregate_id AND j.status IN ('RECEIVED', 'FAILED')) AS w
        WHERE h.parked)`

// Parked counts the aggregates parked by a DEAD head and the events waiting behind
// them, through aggregate_head_parked and journal_state_pending: the cost follows
// what is parked, not the journal.
func Parked(ctx context.Context, db database.DB) (aggregates, waiting int64, err error) {
	err = db.QueryRow(ctx, parkedSQL).Scan(&aggregates, &waiting)
	if err != nil {
		return 0, 0, fmt.Errorf("counting parked aggregates: %w", err)
	}
	return aggregates, waiting, nil
}

// ParkedBehind returns the DEAD head that a pending entry of aggregate with sequence
// number seq waits behind, if its aggregate is parked.
func ParkedBehind(ctx context.Context, db database.DB, aggregate string, seq int64) (id string, parked bool, err error) {
	err = db.QueryRow(ctx, `SELECT head_id::TEXT FROM aggregate_head
		WHERE aggregate_id = $1::TEXT AND parked AND head_seq < $2::INT8`, aggregate, seq).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading the head of aggregate %q: %w", aggregate, err)
	}
	return id, true, nil
}

// staleHeadsSQL finds, among the first $1 due heads (the window claims pick from), those
// whose row no longer matches the journal: the entry is gone, no longer pending, or not
// due after all. Claims skip such rows but pick them first, so enough of them would crowd
// out every due head; nothing inboxd does leaves one, but a journal written behind its
// back (or a bug) could. Each head is looked up by primary key (LATERAL … LIMIT 1): as a
// plain join, PostgreSQL hash-joined a sequential scan of the journal whenever the
// window was large against it (TestHotPlansUseKeys).
const staleHeadsSQL = `
SELECT h.aggregate_id FROM (
	SELECT aggregate_id, head_id FROM aggregate_head
	WHERE NOT parked AND due_at <= now()
	ORDER BY due_at LIMIT $1::INT8
) AS h
LEFT JOIN LATERAL (
	SELECT j.status, j.next_attempt_at FROM journal_state AS j WHERE j.id = h.head_id LIMIT 1) AS j ON true
WHERE j.status IS NULL OR j.status NOT IN ('RECEIVED', 'FAILED') OR j.next_attempt_at > now()`

// RepairStaleHeads recomputes the stale rows among the first window due heads (see
// staleHeadsSQL) and returns how many it found. The sweeper runs it now and then.
func RepairStaleHeads(ctx context.Context, db database.DB, window int) (int, error) {
	rows, err := db.Query(ctx, staleHeadsSQL, window)
	if err != nil {
		return 0, fmt.Errorf("finding stale aggregate heads: %w", err)
	}
	aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("finding stale aggregate heads: %w", err)
	}
	if len(aggs) == 0 {
		return 0, nil
	}
	return len(aggs), inTx(ctx, db, func(tx pgx.Tx) error { return SyncHeads(ctx, tx, aggs) })
}
