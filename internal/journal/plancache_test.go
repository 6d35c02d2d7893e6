package journal_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Ingest's statement is planned for the journal as it is at each batch: never prepared
// under a name, so PostgreSQL cannot settle on a generic plan made while the journal was
// small and keep it while the journal grows (until the next ANALYZE). That plan
// hash-joined a scan of the whole journal in every batch: in a fresh database at 3,000
// msg/s, ingest's statement read 1,100–2,200 blocks per batch instead of about 800.
// The control statement shows that the check sees what pgx prepares by default.
func TestIngestIsNotPreparedGenerically(t *testing.T) {
	ctx := context.Background()
	db := testenv.NewDB(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1 // one session: pg_prepared_statements is per session
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for i := range 7 { // PostgreSQL may go generic from the sixth execution
		b := journal.Batch{Entries: []journal.Entry{entry(t, fmt.Sprintf(`{"id":"6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0b%02d"}`, i))}}
		if _, err := journal.Ingest(ctx, pool, b); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM journal WHERE sequence_no > $1`, int64(i)).Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	prepared := func(like string) int { // the pattern as a parameter: not in the check's own text
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1`, like).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := prepared("%FROM journal WHERE sequence_no > $1%"); n != 1 {
		t.Fatalf("the control statement is prepared %d times, want 1: the check cannot see prepared statements", n)
	}
	if n := prepared("%WITH input AS%INSERT INTO journal%"); n != 0 {
		t.Errorf("ingest's statement is prepared (%d): PostgreSQL may plan it generically and keep that plan", n)
	}
}
