package journal

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/txstats"
)

// settleSQL settles a processing batch in one statement: the outcomes ($1 ids, $2
// statuses, $3 errors, $4 backoffs in ms, $5 start times, $6 durations in ms), the
// attempts worth a history row (historyOf: $7 handler runs), DEAD entries whose type
// runs on, skipped by $9 ($8), and the aggregate_head rows of aggregates $10: each moved
// to its next head, or deleted when the aggregate has no pending work left. It returns
// one row: the outcomes recorded, and the aggregates left with a head that is not
// parked (SettleHeads).
//
// Only journal_state and aggregate_head are written (and journal_attempt): since v0.3.0
// the journal row is never updated by processing.
//
// Its sub-statements share one snapshot and do not see one another's writes
// (https://www.postgresql.org/docs/15/queries-with.html#QUERIES-WITH-MODIFYING), so the
// heads are computed from journal_state as it was and the outcomes: the earliest pending
// entry outside the batch (through journal_state_pending, by key) or the batch's
// earliest FAILED one; likewise for the DEAD entry that parks an aggregate. The result
// is the same whether or not a read sees the statement's own UPDATE. The caller locks
// the aggregate_head rows in an earlier statement (lockAggregateHeadsSQL), so that this
// one's snapshot includes whatever ingest committed for those aggregates (see the
// package comment in heads.go).
//
// Each table is modified once: CockroachDB refuses a statement that modifies one table
// in two places (https://github.com/cockroachdb/cockroach/issues/70731, cockroach PR
// 71595, https://www.cockroachlabs.com/docs/stable/common-table-expressions), so on
// CockroachDB the idle heads are deleted by deleteIdleHeadsSQL, the next statement of
// the same round trip; on PostgreSQL settlePGSQL does it in a sub-statement, on rows
// disjoint from the upsert's (an aggregate either has a head or is idle).
const settleSQL = `
WITH r AS (
	SELECT * FROM unnest($1::UUID[], $2::TEXT[], $3::TEXT[], $4::INT8[], $5::TIMESTAMPTZ[], $6::INT8[], $7::INT8[], $8::BOOL[])
	     AS r(id, status, err, backoff_ms, started_at, duration_ms, runs, skip)
),
u AS (
	UPDATE journal_state AS s
	SET status = r.status, attempts = s.attempts + 1, last_error = r.err,
	    next_attempt_at = CASE WHEN r.status = 'FAILED'
	                           THEN now() + r.backoff_ms * INTERVAL '1 millisecond'
	                           ELSE s.next_attempt_at END,
	    processed_at = CASE WHEN r.status IN ('PROCESSED', 'REJECTED') THEN now() ELSE s.processed_at END,
	    updated_at = now(), last_started_at = r.started_at, last_duration_ms = r.duration_ms,
	    skipped_by = CASE WHEN r.skip THEN $9::TEXT ELSE s.skipped_by END,
	    skipped_at = CASE WHEN r.skip THEN now() ELSE s.skipped_at END
	FROM r
	WHERE s.id = r.id
	RETURNING s.id, s.aggregate_id, s.sequence_no, s.attempts, s.status, s.next_attempt_at, s.skipped_at
),
hist AS (
	INSERT INTO journal_attempt (journal_id, attempt, started_at, duration_ms, runs, outcome, error)
	SELECT r.id, u.attempts, r.started_at, r.duration_ms, r.runs, r.status, r.err
	FROM r JOIN u ON u.id = r.id
	WHERE r.status <> 'PROCESSED' OR r.runs > 1
	ON CONFLICT (journal_id, recorded_at) DO NOTHING
	RETURNING 1
),
uf AS (
	SELECT DISTINCT ON (u.aggregate_id) u.aggregate_id, u.id, u.sequence_no, u.next_attempt_at
	FROM u WHERE u.status = 'FAILED'
	ORDER BY u.aggregate_id, u.sequence_no
),
ud AS (
	SELECT DISTINCT ON (u.aggregate_id) u.aggregate_id, u.id, u.sequence_no, u.next_attempt_at
	FROM u WHERE u.status = 'DEAD' AND u.skipped_at IS NULL
	ORDER BY u.aggregate_id, u.sequence_no
),
a AS (
	SELECT DISTINCT x.aggregate_id FROM unnest($10::TEXT[]) AS x(aggregate_id)
),
c AS (
	SELECT a.aggregate_id,
	       CASE WHEN uf.id IS NOT NULL AND (p.id IS NULL OR uf.sequence_no < p.sequence_no) THEN uf.id ELSE p.id END AS pid,
	       CASE WHEN uf.id IS NOT NULL AND (p.id IS NULL OR uf.sequence_no < p.sequence_no) THEN uf.sequence_no ELSE p.sequence_no END AS pseq,
	       CASE WHEN uf.id IS NOT NULL AND (p.id IS NULL OR uf.sequence_no < p.sequence_no) THEN uf.next_attempt_at ELSE p.next_attempt_at END AS pdue,
	       CASE WHEN uf.id IS NOT NULL AND (p.id IS NULL OR uf.sequence_no < p.sequence_no) THEN 'FAILED' ELSE p.status END AS pstatus,
	       CASE WHEN ud.id IS NOT NULL AND (d.id IS NULL OR ud.sequence_no < d.sequence_no) THEN ud.id ELSE d.id END AS did,
	       CASE WHEN ud.id IS NOT NULL AND (d.id IS NULL OR ud.sequence_no < d.sequence_no) THEN ud.sequence_no ELSE d.sequence_no END AS dseq,
	       CASE WHEN ud.id IS NOT NULL AND (d.id IS NULL OR ud.sequence_no < d.sequence_no) THEN ud.next_attempt_at ELSE d.next_attempt_at END AS ddue
	FROM a
	LEFT JOIN LATERAL (
		SELECT j.id, j.sequence_no, j.next_attempt_at, j.status FROM journal_state AS j
		WHERE j.aggregate_id = a.aggregate_id AND j.status IN ('RECEIVED', 'FAILED') AND j.id <> ALL ($1::UUID[])
		ORDER BY j.sequence_no LIMIT 1) AS p ON true
	LEFT JOIN LATERAL (
		SELECT j.id, j.sequence_no, j.next_attempt_at FROM journal_state AS j
		WHERE j.aggregate_id = a.aggregate_id AND j.status = 'DEAD' AND j.skipped_at IS NULL
		ORDER BY j.sequence_no LIMIT 1) AS d ON true
	LEFT JOIN uf ON uf.aggregate_id = a.aggregate_id
	LEFT JOIN ud ON ud.aggregate_id = a.aggregate_id
),
n AS (
	SELECT c.*, (c.did IS NOT NULL AND (c.pid IS NULL OR c.dseq < c.pseq)) AS parked
	FROM c WHERE c.pid IS NOT NULL OR c.did IS NOT NULL
),
up AS (
` + writeHeadsSQL + `
)`

// settleResultSQL is the select that ends settleSQL (and settlePGSQL).
const settleResultSQL = `
SELECT (SELECT count(*) FROM u), (SELECT count(*) FROM hist),
       ARRAY(SELECT up.aggregate_id FROM up WHERE NOT up.parked ORDER BY up.aggregate_id)`

// settlePGSQL is settleSQL with the idle heads deleted in the same statement
// (PostgreSQL only, see settleSQL).
const settlePGSQL = settleSQL + `,
del AS (
	DELETE FROM aggregate_head AS h
	WHERE h.aggregate_id IN (SELECT a.aggregate_id FROM a WHERE a.aggregate_id NOT IN (SELECT n.aggregate_id FROM n))
	RETURNING 1
)` + settleResultSQL

// settleCRDBSQL is settleSQL as CockroachDB runs it, followed by deleteIdleHeadsSQL.
const settleCRDBSQL = settleSQL + settleResultSQL

// Settled is what Settle did.
type Settled struct {
	// Next holds the aggregates left with a head that is not parked (see SettleHeads).
	Next map[string]bool
}

// settleArgs are the arguments of settleSQL for results and aggregates.
func settleArgs(results []Outcome, aggregates []string) []any {
	args := outcomeArgs(results)
	runs := make([]int64, len(results))
	skip := make([]bool, len(results))
	for i, r := range results {
		runs[i], skip[i] = int64(max(r.Runs, 1)), r.SkipDead
	}
	return append(args, runs, skip, RunOnSkipper, aggregates)
}

// sortedAggregates returns aggregates sorted, without repeats: the order every
// statement locks aggregate_head rows in.
func sortedAggregates(aggregates []string) []string {
	aggs := slices.Clone(aggregates)
	slices.Sort(aggs)
	return slices.Compact(aggs)
}

// Settle records a batch's outcomes and moves their aggregates on (see settleSQL) inside
// a savepoint: when the database refuses them, tx is rolled back to it and stays usable
// (the handlers' effects in it stay), so the caller can record them another way. A
// nested savepoint can be rolled back after any error but a retry error on CockroachDB,
// and those are availability errors here (https://www.cockroachlabs.com/docs/stable/savepoint).
// The savepoint is left open when all went well: COMMIT commits it with the rest, on
// both databases (https://www.cockroachlabs.com/docs/stable/release-savepoint,
// https://www.postgresql.org/docs/15/sql-commit.html), and a RELEASE would be one more
// statement in every batch. The savepoint, the head rows' lock and the settle go in one
// round trip, and run in that order on the server.
//
// It returns the aggregates left with a head that is not parked.
func Settle(ctx context.Context, tx pgx.Tx, results []Outcome, aggregates []string) (map[string]bool, error) {
	if len(results) == 0 {
		return nil, nil
	}
	aggs := sortedAggregates(aggregates)
	var (
		n    int64
		next []string
		err  error
	)
	if database.DialectOf(tx.Conn()) == database.PostgreSQL {
		n, next, err = settlePG(ctx, tx, aggs, settleArgs(results, aggs))
	} else {
		n, next, err = settleCRDB(ctx, tx, aggs, settleArgs(results, aggs))
	}
	if err == nil {
		err = checkSettled(len(results), n)
	}
	if err == nil {
		out := make(map[string]bool, len(next))
		for _, a := range next {
			out[a] = true
		}
		return out, nil
	}
	err = fmt.Errorf("recording %d processing outcomes: %w", len(results), err)
	if IsUnavailable(err) {
		return nil, err
	}
	if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT inboxd_outcomes`); rerr != nil {
		return nil, fmt.Errorf("%w (and rolling back to the outcomes savepoint: %w)", err, rerr)
	}
	return nil, err
}

// settleCRDB sends the savepoint, the lock, settleCRDBSQL and deleteIdleHeadsSQL in one
// pgx batch. CockroachDB plans and caches statements its own way.
func settleCRDB(ctx context.Context, tx pgx.Tx, aggs []string, args []any) (n int64, next []string, err error) {
	b := &pgx.Batch{}
	b.Queue(`SAVEPOINT inboxd_outcomes`)
	if len(aggs) > 0 {
		b.Queue(lockAggregateHeadsSQL, aggs)
	}
	b.Queue(settleCRDBSQL, args...)
	if len(aggs) > 0 {
		b.Queue(deleteIdleHeadsSQL, aggs)
	}
	br := tx.SendBatch(ctx, b)
	var hist int64
	_, err = br.Exec()
	if err == nil && len(aggs) > 0 {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&n, &hist, &next)
	}
	if err == nil && len(aggs) > 0 {
		_, err = br.Exec()
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return n, next, err
}

// settlePG sends the savepoint, the lock and settlePGSQL in one pipeline, settlePGSQL
// as an unnamed statement: planned for its arguments every time, never from a generic
// plan, which pgx's prepared statements get from their sixth run. A generic plan made
// while the journal was small joined a scan of the whole journal in every batch once it
// had grown (TestSettleIsPlannedForTheJournalAsItIs); a pgx batch prepares every
// statement it sends, and bracketing it with SET LOCAL plan_cache_mode cost two more
// statements per batch.
// https://www.postgresql.org/docs/15/sql-prepare.html#SQL-PREPARE-NOTES
func settlePG(ctx context.Context, tx pgx.Tx, aggs []string, args []any) (n int64, next []string, err error) {
	conn := tx.Conn()
	var settle, lock pgx.ExtendedQueryBuilder
	if err := settle.Build(conn.TypeMap(), nil, args); err != nil {
		return 0, nil, fmt.Errorf("encoding the outcomes: %w", err)
	}
	if err := lock.Build(conn.TypeMap(), nil, []any{aggs}); err != nil {
		return 0, nil, fmt.Errorf("encoding the aggregates: %w", err)
	}
	txstats.Sent(ctx, 2+min(len(aggs), 1))
	p := conn.PgConn().StartPipeline(ctx)
	p.SendQueryParams(`SAVEPOINT inboxd_outcomes`, nil, nil, nil, nil)
	if len(aggs) > 0 {
		p.SendQueryParams(lockAggregateHeadsSQL, lock.ParamValues, nil, lock.ParamFormats, nil)
	}
	p.SendQueryParams(settlePGSQL, settle.ParamValues, nil, settle.ParamFormats, nil)
	p.SendPipelineSync()
	if err := p.Flush(); err != nil {
		_ = p.Close()
		return 0, nil, err
	}
	var hist int64
	read := func(scan bool) error {
		res, err := p.GetResults()
		if err != nil {
			return err
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			return fmt.Errorf("settling: unexpected pipeline result %T", res)
		}
		if !scan {
			_, err := rr.Close()
			return err
		}
		scanned := false
		for rr.NextRow() {
			fds, vals := rr.FieldDescriptions(), rr.Values()
			if len(vals) != 3 {
				return fmt.Errorf("settling: %d columns, want 3", len(vals))
			}
			for i, dst := range []any{&n, &hist, &next} {
				if err := conn.TypeMap().Scan(fds[i].DataTypeOID, fds[i].Format, vals[i], dst); err != nil {
					return fmt.Errorf("settling: reading column %d: %w", i+1, err)
				}
			}
			scanned = true
		}
		if _, err := rr.Close(); err != nil {
			return err
		}
		if !scanned {
			return errors.New("settling: no result row")
		}
		return nil
	}
	err = read(false)
	if err != nil {
		err = fmt.Errorf("opening the outcomes savepoint: %w", err)
	}
	if err == nil && len(aggs) > 0 {
		if lerr := read(false); lerr != nil {
			err = fmt.Errorf("locking %d aggregate heads: %w", len(aggs), lerr)
		}
	}
	if err == nil {
		err = read(true)
	}
	if cerr := p.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return n, next, err
}

func checkSettled(want int, n int64) error {
	if int(n) != want {
		return fmt.Errorf("%d rows affected", n)
	}
	return nil
}
