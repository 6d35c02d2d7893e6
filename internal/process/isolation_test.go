package process

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// On CockroachDB every processing transaction begins with explicit SERIALIZABLE, so an
// operator's READ COMMITTED default cannot change the guarantees (issue 19, item 3); on
// PostgreSQL the session's default stays.
func TestTxOptionsByDatabase(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		dialect database.Dialect
		want    pgx.TxIsoLevel
	}{{database.CockroachDB, pgx.Serializable}, {database.PostgreSQL, ""}} {
		e := New(nil, nil, Config{Dialect: tt.dialect}, nil, nil)
		if got := e.txOptions().IsoLevel; got != tt.want {
			t.Errorf("%s: isolation %q, want %q", tt.dialect, got, tt.want)
		}
	}
}
