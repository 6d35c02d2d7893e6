package testenv

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestLimitProxy: a statement whose parameters exceed the limit is refused with
// CockroachDB's 08P01, one under it passes, and the pool keeps working afterwards.
func TestLimitProxy(t *testing.T) {
	db, proxy := NewLimitedDB(t, 1<<20)
	ctx := context.Background()
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT length($1::TEXT)`, strings.Repeat("a", 1<<20-100)).Scan(&n); err != nil {
		t.Fatalf("a statement under the limit: %v", err)
	}
	err := db.Pool.QueryRow(ctx, `SELECT length($1::TEXT)`, strings.Repeat("a", 1<<20+1)).Scan(&n)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "08P01" || !strings.Contains(pgErr.Message, "bigger than maximum allowed message size 1.0 MiB") {
		t.Fatalf("a statement over the limit: got %v, want SQLSTATE 08P01 message too large", err)
	}
	if got := proxy.Refused(); got != 1 {
		t.Errorf("refused %d messages, want 1", got)
	}
	if proxy.Largest() <= 1<<20 {
		t.Errorf("largest message %d, want over the limit", proxy.Largest())
	}
	if err := db.Pool.QueryRow(ctx, `SELECT 1`).Scan(&n); err != nil {
		t.Fatalf("the pool after a refusal: %v", err)
	}
}

func TestIBytes(t *testing.T) {
	for n, want := range map[int]string{100: "100 B", 1 << 20: "1.0 MiB", 16 << 20: "16 MiB", 17<<20 + 5: "17 MiB"} {
		if got := iBytes(n); got != want {
			t.Errorf("iBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
