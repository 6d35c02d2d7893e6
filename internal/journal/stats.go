package journal

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/database"
)

// Stats summarises the journal and the quarantine.
type Stats struct {
	Now      time.Time                   // the database's clock, to compute ages against
	ByStatus map[Status]int64            // every status, zero included
	ByType   map[string]map[Status]int64 // event type → status → count
	Total    int64
	// Estimated reports a journal of more than ExactCountLimit entries: Total and
	// ByStatus[PROCESSED] are then estimates from the database's table statistics, and
	// ByType holds no PROCESSED counts. Every other count is exact.
	Estimated bool
	// OldestPending is the received_at of the oldest RECEIVED or FAILED entry; nil when none.
	OldestPending           *time.Time
	Quarantined             int64
	QuarantineNotReinjected int64
}

// ExactCountLimit is the journal size up to which ReadStats counts every entry. Above it,
// only the statuses that partial indexes hold (RECEIVED and FAILED in journal_state_pending;
// FAILED, DEAD and REJECTED in journal_state_attention) are counted, and the PROCESSED entries,
// which are most of a large journal, are estimated: counting them would read the whole
// journal, about 600 M entries at 1,000 msg/s kept 7 days. The bound is small, so that
// the count answers in a few milliseconds whatever the size: counting up to 100,001
// entries took 208 ms at 102,000 (issue 27).
const ExactCountLimit = 10_000

// ReadStats counts entries by type and status without reading the journal: its cost
// follows the pending and attention work (and at most ExactCountLimit entries), not the
// journal's size, so the console can poll it.
func ReadStats(ctx context.Context, db database.DB) (Stats, error) {
	s := Stats{ByStatus: make(map[Status]int64, len(Statuses)), ByType: map[string]map[Status]int64{}}
	for _, st := range Statuses {
		s.ByStatus[st] = 0
	}
	add := func(typ string, status Status, n int64) {
		s.ByStatus[status] += n
		if s.ByType[typ] == nil {
			s.ByType[typ] = map[Status]int64{}
		}
		s.ByType[typ][status] += n
		s.Total += n
	}
	est, err := estimateRows(ctx, db)
	if err != nil {
		return Stats{}, err
	}
	exact := false
	if est <= 2*ExactCountLimit { // a stale or missing estimate: the capped count below decides
		exact, err = countCapped(ctx, db, add)
		if err != nil {
			return Stats{}, err
		}
	}
	if !exact {
		if err := countIndexed(ctx, db, add); err != nil {
			return Stats{}, err
		}
		types, err := EventTypes(ctx, db)
		if err != nil {
			return Stats{}, err
		}
		for _, t := range types {
			if s.ByType[t] == nil {
				s.ByType[t] = map[Status]int64{}
			}
		}
		// The estimate lags; it is never below what was counted, nor below the cap.
		total := max(est, s.Total, ExactCountLimit+1)
		s.ByStatus[StatusProcessed] = total - s.Total
		s.Total, s.Estimated = total, true
	}
	err = db.QueryRow(ctx, pendingAgeSQL).Scan(&s.Now, &s.OldestPending, &s.Quarantined, &s.QuarantineNotReinjected)
	if err != nil {
		return Stats{}, fmt.Errorf("reading pending age and quarantine count: %w", err)
	}
	return s, nil
}

// pendingAgeSQL reads the oldest pending entry through journal_state_pending (its
// received_at by key), and the quarantine.
const pendingAgeSQL = `SELECT now(),
		(SELECT min(j.received_at) FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		 WHERE s.status IN ('RECEIVED', 'FAILED')),
		(SELECT count(*) FROM quarantine),
		(SELECT count(*) FROM quarantine WHERE reinjected_at IS NULL)`

// countCappedSQL counts by type and status at most $1 entries: all of them when the
// journal is small, and a bounded read when it is not.
const countCappedSQL = `SELECT t.event_type, t.status, count(*) FROM (
		SELECT j.event_type, s.status FROM journal_state AS s JOIN journal AS j ON j.id = s.id LIMIT $1::INT8) AS t
	GROUP BY t.event_type, t.status`

// countCapped counts every entry if there are at most ExactCountLimit, and reports
// whether it did.
func countCapped(ctx context.Context, db database.DB, add func(typ string, status Status, n int64)) (bool, error) {
	type row struct {
		typ    string
		status Status
		n      int64
	}
	var out []row
	var sum int64
	err := countGrouped(ctx, db, func(typ string, status Status, n int64) {
		out, sum = append(out, row{typ, status, n}), sum+n
	}, countCappedSQL, ExactCountLimit+1)
	if err != nil || sum > ExactCountLimit {
		return false, err
	}
	for _, r := range out {
		add(r.typ, r.status, r.n)
	}
	return true, nil
}

// The statuses each partial index holds. The status lists are literals, never
// parameters, so that the planner can prove the index's predicate (a generic plan with
// status = ANY ($1) could not, and would read the whole journal).
const (
	// journal_state_pending: RECEIVED and FAILED (each entry's type by key).
	countPendingSQL = `SELECT j.event_type, s.status, count(*) FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		WHERE s.status IN ('RECEIVED', 'FAILED') GROUP BY j.event_type, s.status`
	// journal_state_attention: FAILED (counted above), DEAD and REJECTED.
	countAttentionSQL = `SELECT j.event_type, s.status, count(*) FROM journal_state AS s JOIN journal AS j ON j.id = s.id
		WHERE s.status IN ('DEAD', 'REJECTED') GROUP BY j.event_type, s.status`
)

// countIndexed counts the statuses the partial indexes hold, by type.
func countIndexed(ctx context.Context, db database.DB, add func(typ string, status Status, n int64)) error {
	if err := countGrouped(ctx, db, add, countPendingSQL); err != nil {
		return err
	}
	return countGrouped(ctx, db, add, countAttentionSQL)
}

// countGrouped runs a statement returning (event_type, status, count) rows.
func countGrouped(ctx context.Context, db database.DB, add func(typ string, status Status, n int64), sql string, args ...any) error {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("counting journal entries: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var typ string
		var status Status
		var n int64
		if err := rows.Scan(&typ, &status, &n); err != nil {
			return fmt.Errorf("counting journal entries: %w", err)
		}
		add(typ, status, n)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("counting journal entries: %w", err)
	}
	return nil
}

// MaxEventTypes bounds EventTypes: the event types are a small vocabulary, not data.
const MaxEventTypes = 1000

// eventTypesSQL lists the distinct event types by hopping through journal_type_seq, one
// index descent per type (a "loose index scan"), instead of reading every entry.
// Recursive CTEs: https://www.cockroachlabs.com/docs/stable/common-table-expressions#recursive-common-table-expressions
const eventTypesSQL = `WITH RECURSIVE types (event_type, n) AS (
		(SELECT event_type, 1 FROM journal ORDER BY event_type LIMIT 1)
		UNION ALL
		SELECT (SELECT j.event_type FROM journal AS j WHERE j.event_type > t.event_type ORDER BY j.event_type LIMIT 1), t.n + 1
		FROM types AS t WHERE t.event_type IS NOT NULL AND t.n < $1::INT8
	)
	SELECT event_type FROM types WHERE event_type IS NOT NULL`

// EventTypes returns the event types in the journal, in order, at most MaxEventTypes.
func EventTypes(ctx context.Context, db database.DB) ([]string, error) {
	rows, err := db.Query(ctx, eventTypesSQL, MaxEventTypes)
	if err != nil {
		return nil, fmt.Errorf("listing event types: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("listing event types: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing event types: %w", err)
	}
	return out, nil
}

// pgRowEstimateSQL is PostgreSQL's own estimate of the journal's rows, computed the way
// its planner does: the density of the last VACUUM or ANALYZE (reltuples / relpages)
// times the table's current size in pages, so it follows growth between two ANALYZE
// runs. -1 when the table has never been analyzed.
// https://www.postgresql.org/docs/15/row-estimation-examples.html
const pgRowEstimateSQL = `SELECT CASE WHEN c.reltuples < 0 OR c.relpages = 0 THEN -1
		ELSE (c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::FLOAT8))::INT8 END
	FROM pg_class AS c WHERE c.oid = 'journal'::REGCLASS`

// crdbRowEstimateSQL is CockroachDB's: the row count of the newest full table
// statistics, which it refreshes automatically as rows change (a SHOW statement used as
// a data source). -1 when there are none yet.
// https://www.cockroachlabs.com/docs/stable/show-statistics
// https://www.cockroachlabs.com/docs/stable/selection-queries#using-the-output-of-other-statements
// https://www.cockroachlabs.com/docs/stable/cost-based-optimizer#table-statistics
//
// Partial statistics are skipped: collected over an index's extremes only (CREATE
// STATISTICS … USING EXTREMES, and automatically from v25.1), their row_count counts
// the rows scanned, not the table's. SHOW STATISTICS gives them a partial_predicate
// (and the id of the full statistic they extend), NULL for a full one: its columns
// are statistics_name, column_names, created, row_count, distinct_count, null_count,
// avg_size, partial_predicate, histogram_id, full_histogram_id
// (https://github.com/cockroachdb/cockroach/blob/master/pkg/sql/show_stats.go,
// showTableStatsColumns; partial statistics and their columns came with v23.1, before
// database.MinVersion).
const crdbRowEstimateSQL = `SELECT coalesce((SELECT row_count FROM [SHOW STATISTICS FOR TABLE journal]
	WHERE partial_predicate IS NULL ORDER BY created DESC LIMIT 1), -1)::INT8`

// estimateRows returns the database's estimate of the journal's rows, or -1.
func estimateRows(ctx context.Context, db database.DB) (int64, error) {
	var version string
	if err := db.QueryRow(ctx, `SELECT version()`).Scan(&version); err != nil {
		return 0, fmt.Errorf("reading the database version: %w", err)
	}
	var n int64
	var err error
	if strings.Contains(version, "CockroachDB") {
		err = db.QueryRow(ctx, crdbRowEstimateSQL).Scan(&n)
	} else {
		err = db.QueryRow(ctx, pgRowEstimateSQL).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("estimating the journal's size: %w", err)
	}
	return n, nil
}
