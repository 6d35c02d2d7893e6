package journal_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestIngestRetriesSerializationFailures: a 40001 is a transient conflict, not an
// outage. Ingest runs its idempotent statement again, with a growing pause that lets the
// conflicting transaction finish, instead of failing the batch: that would drop the
// broker connection and, on RabbitMQ, hand a single-active-consumer queue to another
// instance. Found in the CockroachDB-faithful profile, where PostgreSQL's SSI failed two
// disjoint commits in flight five times within 100 ms under load (false conflicts on
// shared index pages; CockroachDB fails such transactions on read refreshes instead).
// The conflicts are injected by a trigger that fails the journal's first n inserting
// statements; a sequence counts them, since a failed statement rolls back anything else.
func TestIngestRetriesSerializationFailures(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		fail    int64
		wantErr bool
	}{
		{"a few", 3, false},
		{"more than the old bound of five", 8, false},
		{"forever", 1 << 40, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, stmt := range []string{
				`CREATE SEQUENCE test_conflicts`,
				fmt.Sprintf(`CREATE FUNCTION test_conflict() RETURNS trigger LANGUAGE plpgsql AS $$
				 BEGIN
				   IF nextval('test_conflicts') <= %d THEN
				     RAISE EXCEPTION 'injected conflict' USING ERRCODE = '40001';
				   END IF;
				   RETURN NULL;
				 END $$`, tt.fail),
				`CREATE TRIGGER test_conflict BEFORE INSERT ON journal FOR EACH STATEMENT EXECUTE FUNCTION test_conflict()`,
			} {
				if _, err := db.Pool.Exec(ctx, stmt); err != nil {
					t.Fatalf("%s: %v", stmt, err)
				}
			}
			start := time.Now()
			res, err := journal.Ingest(ctx, db.Pool, journal.Batch{Entries: []journal.Entry{goodEntry(t, 1), goodEntry(t, 2)}})
			took := time.Since(start)
			var attempts int64
			if err := db.Pool.QueryRow(ctx, `SELECT last_value FROM test_conflicts`).Scan(&attempts); err != nil {
				t.Fatal(err)
			}
			if tt.wantErr {
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
					t.Fatalf("Ingest = %v, want the 40001 once the retries are spent", err)
				}
				if took > 10*time.Second {
					t.Fatalf("Ingest gave up after %s; its retries must stay bounded", took)
				}
				t.Logf("gave up after %d attempts in %s", attempts, took.Round(time.Millisecond))
				return
			}
			if err != nil || res.Inserted != 2 {
				t.Fatalf("Ingest = %+v, %v; want both entries inserted after %d conflicts", res, err, tt.fail)
			}
			if attempts != tt.fail+1 {
				t.Errorf("the statement ran %d times, want %d", attempts, tt.fail+1)
			}
		})
	}
}
