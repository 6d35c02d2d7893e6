package database_test

import (
	"context"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/testenv"
)

// What each dialect answers; the parts of inboxd decide by these alone.
func TestDialectCapabilities(t *testing.T) {
	for _, tt := range []struct {
		d                          database.Dialect
		name                       string
		listen, rowTTL, changefeed bool
	}{
		{database.PostgreSQL, "postgresql", true, false, false},
		{database.CockroachDB, "cockroachdb", false, true, true},
	} {
		if got := tt.d.String(); got != tt.name {
			t.Errorf("String() = %q, want %q", got, tt.name)
		}
		if tt.d.Listen() != tt.listen || tt.d.RowTTL() != tt.rowTTL || tt.d.Changefeed() != tt.changefeed {
			t.Errorf("%s: Listen %v, RowTTL %v, Changefeed %v; want %v, %v, %v", tt.d,
				tt.d.Listen(), tt.d.RowTTL(), tt.d.Changefeed(), tt.listen, tt.rowTTL, tt.changefeed)
		}
	}
	if (database.Dialect(0)) != database.PostgreSQL {
		t.Error("the zero Dialect is not PostgreSQL")
	}
}

// PostgreSQL is detected as such, by the query and by the connection alike; TxPool
// leaves its pool as it is.
func TestDetectPostgreSQL(t *testing.T) {
	db := testenv.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := database.Detect(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if d != database.PostgreSQL {
		t.Errorf("Detect = %s, want postgresql", d)
	}
	c, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if got := database.DialectOf(c.Conn()); got != database.PostgreSQL {
		t.Errorf("DialectOf = %s, want postgresql", got)
	}
	if got := database.PostgreSQL.TxPool(db.Pool); got != database.DB(db.Pool) {
		t.Errorf("PostgreSQL.TxPool = %T, want the pool itself", got)
	}
	if _, ok := database.CockroachDB.TxPool(db.Pool).(database.SerializablePool); !ok {
		t.Error("CockroachDB.TxPool is not a SerializablePool")
	}

	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := database.Detect(cctx, db.Pool); err == nil {
		t.Error("Detect on a canceled context: no error")
	}
}
