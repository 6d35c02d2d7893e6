package journal

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestIsSchemaContracted: the database's answers to a statement that names a dropped
// journal state column are the contraction, on PostgreSQL and on CockroachDB; another
// undefined column, another code, and pgx's one-off 0A000 are not.
func TestIsSchemaContracted(t *testing.T) {
	t.Parallel()
	pg := func(code, msg string) error {
		return fmt.Errorf("claiming due journal entries: %w", &pgconn.PgError{Code: code, Message: msg})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"PostgreSQL, qualified", pg("42703", "column j.status does not exist"), true},
		{"PostgreSQL, unqualified", pg("42703", `column "next_attempt_at" does not exist`), true},
		{"PostgreSQL, an UPDATE's target", pg("42703", `column "last_duration_ms" of relation "journal" does not exist`), true},
		{"CockroachDB, unqualified", pg("42703", `column "attempts" does not exist`), true},
		{"CockroachDB, qualified", pg("42703", `column "j.skipped_at" does not exist`), true},
		{"the sentinel", fmt.Errorf("x: %w", ErrSchemaContracted), true},
		{"a handler's own column", pg("42703", `column "customer_name" does not exist`), false},
		{"another table's target", pg("42703", `column "status" of relation "orders" does not exist`), false},
		{"another code", pg("42P01", `relation "journal" does not exist`), false},
		{"pgx's stale cached plan", pg("0A000", "cached plan must not change result type"), false},
		{"not a database error", errors.New("column status does not exist"), false},
		{"nil", nil, false},
	} {
		if got := IsSchemaContracted(tc.err); got != tc.want {
			t.Errorf("%s: IsSchemaContracted(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestContractionReportsOnce: the first report is kept for /readyz; later ones, and
// errors that are not the contraction, change nothing.
func TestContractionReportsOnce(t *testing.T) {
	t.Parallel()
	var logged bytes.Buffer
	c := Contraction{Log: slog.New(slog.NewTextHandler(&logged, nil))}
	if c.Report(errors.New("connection refused")) || c.Err() != nil {
		t.Fatal("an outage reported as a contraction")
	}
	first := &pgconn.PgError{Code: "42703", Message: "column j.status does not exist"}
	if !c.Report(first) || !c.Report(&pgconn.PgError{Code: "42703", Message: `column "attempts" does not exist`}) {
		t.Fatal("a contraction not reported")
	}
	if err := c.Err(); !errors.Is(err, ErrSchemaContracted) || !errors.Is(err, first) {
		t.Errorf("Err() = %v, want ErrSchemaContracted wrapping the first report", err)
	}
	if n := strings.Count(logged.String(), "level=ERROR"); n != 1 || strings.Count(logged.String(), "\n") != 1 {
		t.Errorf("logged %q, want one ERROR line", logged.String())
	}
	var none *Contraction
	if !none.Report(first) || none.Err() != nil {
		t.Error("a nil Contraction must classify and keep nothing")
	}
}
