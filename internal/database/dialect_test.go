package database_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// versionRow answers version() with a fixed text.
type versionRow string

func (r versionRow) Scan(dest ...any) error {
	*dest[0].(*string) = string(r)
	return nil
}

// versionDB is a database that answers only version().
type versionDB struct {
	database.DB
	version string
}

func (d versionDB) QueryRow(context.Context, string, ...any) pgx.Row { return versionRow(d.version) }

// A CockroachDB older than MinVersion is refused where inboxd starts (Client.Run and
// Migrate detect the dialect first), with its release named; PostgreSQL, and
// CockroachDB from v24.1 on, pass.
func TestDetectRefusesOldCockroachDB(t *testing.T) {
	for _, tt := range []struct {
		version string
		want    database.Dialect
		tooOld  bool
	}{
		{version: "PostgreSQL 15.20 (Debian 15.20-0+deb12u1) on x86_64-pc-linux-gnu", want: database.PostgreSQL},
		{version: "CockroachDB CCL v24.1.0 (x86_64-pc-linux-gnu, built 2024/05/15 21:28:29, go1.22.2 X:nocoverageredesign)", want: database.CockroachDB},
		{version: "CockroachDB CCL v25.2.1 (aarch64-unknown-linux-gnu, built 2025/06/03 15:22:03, go1.23.7 X:nocoverageredesign)", want: database.CockroachDB},
		{version: "CockroachDB CCL v23.2.5 (x86_64-pc-linux-gnu, built 2024/05/06 18:09:46, go1.21.9 X:nocoverageredesign)", want: database.CockroachDB, tooOld: true},
	} {
		t.Run(tt.version[:22], func(t *testing.T) {
			d, err := database.Detect(context.Background(), versionDB{version: tt.version})
			if d != tt.want {
				t.Errorf("Detect = %s, want %s", d, tt.want)
			}
			if tt.tooOld != errors.Is(err, database.ErrVersionTooOld) || !tt.tooOld && err != nil {
				t.Fatalf("Detect error = %v, want too old: %v", err, tt.tooOld)
			}
			if tt.tooOld && !strings.Contains(err.Error(), "v23.2.5") {
				t.Errorf("error %q does not name the release", err)
			}
		})
	}
}
