package process

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// On CockroachDB every processing transaction begins with explicit SERIALIZABLE, so an
// operator's READ COMMITTED default cannot change the guarantees (issue 19, item 3); on
// PostgreSQL the session's default stays.
func TestTxOptionsByDatabase(t *testing.T) {
	for _, tt := range []struct {
		crdb bool
		want pgx.TxIsoLevel
	}{{true, pgx.Serializable}, {false, ""}} {
		e := New(nil, nil, Config{CockroachDB: tt.crdb}, nil, nil)
		if got := e.txOptions().IsoLevel; got != tt.want {
			t.Errorf("CockroachDB %v: isolation %q, want %q", tt.crdb, got, tt.want)
		}
	}
}
