package database_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/testenv"
)

// SerializablePool (the service's pool on CockroachDB) begins journal transactions
// SERIALIZABLE whatever the session's default; an explicit isolation still wins.
func TestSerializablePoolBeginsSerializable(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Isolation: "read committed"})
	ctx := context.Background()
	p := database.SerializablePool{Pool: db.Pool}
	for _, tt := range []struct {
		name  string
		begin func() (pgx.Tx, error)
		want  string
	}{
		{"Begin", func() (pgx.Tx, error) { return p.Begin(ctx) }, "serializable"},
		{"BeginTx zero", func() (pgx.Tx, error) { return p.BeginTx(ctx, pgx.TxOptions{}) }, "serializable"},
		{"BeginTx explicit", func() (pgx.Tx, error) { return p.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}) }, "repeatable read"},
		{"plain pool", func() (pgx.Tx, error) { return db.Pool.Begin(ctx) }, "read committed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tx, err := tt.begin()
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			var got string
			if err := tx.QueryRow(ctx, "SHOW transaction_isolation").Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("isolation = %q, want %q", got, tt.want)
			}
		})
	}
}
