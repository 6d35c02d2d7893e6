package journal_test

import (
	"context"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// showStatistics is where CockroachDB's estimate reads its statistics from.
const showStatistics = "[SHOW STATISTICS FOR TABLE journal]"

// CockroachDB's estimate of the journal's rows reads full statistics only: a partial
// statistic (collected over an index's extremes, which v25.1 does automatically)
// counts only the rows it scanned. SHOW STATISTICS is emulated on PostgreSQL by a table
// of its columns.
func TestCRDBRowEstimateIgnoresPartialStatistics(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	ctx := context.Background()
	if !strings.Contains(journal.CRDBRowEstimateSQL, showStatistics) {
		t.Fatalf("the estimate no longer reads %s: %s", showStatistics, journal.CRDBRowEstimateSQL)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE show_statistics (
		statistics_name TEXT, column_names TEXT[], created TIMESTAMPTZ, row_count INT8, distinct_count INT8,
		null_count INT8, avg_size INT8, partial_predicate TEXT, histogram_id INT8, full_histogram_id INT8)`); err != nil {
		t.Fatal(err)
	}
	query := strings.Replace(journal.CRDBRowEstimateSQL, showStatistics, "show_statistics", 1)
	for _, tc := range []struct {
		name string
		rows string
		want int64
	}{
		{"none", ``, -1},
		{"full", `('__auto__', '{id}', now() - interval '1 hour', 5000000, 5000000, 0, 16, NULL, 1, NULL)`, 5000000},
		{"partial newer than the full", `('__auto__', '{id}', now() - interval '1 hour', 5000000, 5000000, 0, 16, NULL, 1, NULL),
			('__auto_partial__', '{id}', now(), 10001, 10001, 0, 16, 'id < ''a'' OR id > ''f''', 2, 1)`, 5000000},
		{"only partial", `('__auto_partial__', '{id}', now(), 10001, 10001, 0, 16, 'id < ''a''', 2, 1)`, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := db.Pool.Exec(ctx, `DELETE FROM show_statistics`); err != nil {
				t.Fatal(err)
			}
			if tc.rows != "" {
				if _, err := db.Pool.Exec(ctx, `INSERT INTO show_statistics VALUES `+tc.rows); err != nil {
					t.Fatal(err)
				}
			}
			var n int64
			if err := db.Pool.QueryRow(ctx, query).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != tc.want {
				t.Errorf("estimate %d, want %d", n, tc.want)
			}
		})
	}
}
