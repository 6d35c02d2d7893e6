package database

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Dialect is the database inboxd runs on: PostgreSQL or CockroachDB. Detect tells it
// once, when inboxd starts, and the assembly passes it to every part that behaves
// differently on the two; no part asks the database again. The zero value is
// PostgreSQL.
type Dialect uint8

const (
	PostgreSQL Dialect = iota
	CockroachDB
)

// String is "postgresql" or "cockroachdb", as the API reports it.
func (d Dialect) String() string {
	if d == CockroachDB {
		return "cockroachdb"
	}
	return "postgresql"
}

// Listen reports LISTEN/NOTIFY, which wakes processing and the outbox relay as soon as
// a transaction commits. PostgreSQL has it; CockroachDB does not, and its changefeeds
// deliver the wake-ups there instead.
func (d Dialect) Listen() bool { return d == PostgreSQL }

// RowTTL reports row-level TTL, with which the database deletes expired journal and
// quarantine rows itself ("inboxd migrate" sets it); without it inboxd's pruner does
// (https://www.cockroachlabs.com/docs/stable/row-level-ttl).
func (d Dialect) RowTTL() bool { return d == CockroachDB }

// Changefeed reports CREATE CHANGEFEED, with which the database posts new journal rows
// to inboxd's webhook; without it the sweeper (and LISTEN) drive processing
// (https://www.cockroachlabs.com/docs/stable/create-changefeed).
func (d Dialect) Changefeed() bool { return d == CockroachDB }

// TxPool is p for the transactions inboxd begins with Begin (operator actions, head
// repairs): on CockroachDB a SerializablePool, so that they begin SERIALIZABLE whatever
// the session's default, as processing's do; on PostgreSQL p itself, whose session
// default processing relies on.
func (d Dialect) TxPool(p *pgxpool.Pool) DB {
	if d == CockroachDB {
		return SerializablePool{Pool: p}
	}
	return p
}

// versionSQL tells CockroachDB from PostgreSQL: CockroachDB's version() starts with
// "CockroachDB CCL v…".
// https://www.cockroachlabs.com/docs/stable/functions-and-operators#system-info-functions
const versionSQL = `SELECT version()`

// Detect asks the database which dialect it speaks. Sent unprepared: a statement run
// once gains nothing from preparing. A CockroachDB older than MinVersion is an error
// (ErrVersionTooOld): Client.Run and Migrate then stop at start with a message that
// names the release, instead of failing every processing transaction on a session
// variable it lacks (enable_durable_locking_for_serializable, v23.2) or locking
// differently (SKIP LOCKED over replicated locks, v24.1).
func Detect(ctx context.Context, db DB) (Dialect, error) {
	var v string
	if err := db.QueryRow(ctx, versionSQL, pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil {
		return PostgreSQL, fmt.Errorf("detecting the database: %w", err)
	}
	if strings.Contains(v, "CockroachDB") {
		// version() reads as crdb_version does: "CockroachDB CCL v24.1.0 (…)".
		if _, err := CheckVersion(v); err != nil {
			return CockroachDB, fmt.Errorf("detecting the database: %w", err)
		}
		return CockroachDB, nil
	}
	return PostgreSQL, nil
}

// VersionParam is the parameter CockroachDB reports its release in at connection start
// (pkg/sql/pgwire/conn.go, statusReportParams; pgconn.PgConn.ParameterStatus), in the
// form ParseVersion reads. PostgreSQL reports no such parameter.
const VersionParam = "crdb_version"

// DialectOf tells the dialect of the server c is connected to by VersionParam, without
// a round trip. It is for where no Dialect can be passed: outbox.EmitBatch, which
// handlers call with nothing but their transaction, and the notifier's own connection,
// which refuses to wait for a LISTEN that CockroachDB will never take. Everything else
// takes the Dialect that Detect found.
func DialectOf(c *pgx.Conn) Dialect {
	if c != nil && c.PgConn() != nil && c.PgConn().ParameterStatus(VersionParam) != "" {
		return CockroachDB
	}
	return PostgreSQL
}

// ShadowBeginSQL begins a shadow run's transaction (internal/replay) with its bounds on
// live traffic, in one simple query: a lock timeout, so that a row a live transaction
// holds fails the shadowed event ("timed out") instead of queueing behind it, and a
// statement timeout. SET LOCAL lasts until the transaction ends on both databases
// (https://www.cockroachlabs.com/docs/stable/set-vars#set-local), and CockroachDB has
// lock_timeout (https://www.cockroachlabs.com/docs/stable/session-variables).
//
// On CockroachDB it begins PRIORITY LOW too: a low-priority transaction is the one
// pushed or aborted when it meets a normal one, so live processing wins every conflict
// (https://www.cockroachlabs.com/docs/stable/transactions#transaction-priorities,
// https://www.cockroachlabs.com/docs/stable/begin-transaction). AS OF SYSTEM TIME,
// which would avoid the conflicts, takes read-only transactions only, and a shadow
// transaction writes (https://www.cockroachlabs.com/docs/stable/as-of-system-time).
// SERIALIZABLE is explicit, as processing's is, whatever the session's default.
func (d Dialect) ShadowBeginSQL(lockTimeout, statementTimeout time.Duration) string {
	begin := "BEGIN"
	if d == CockroachDB {
		begin = "BEGIN TRANSACTION PRIORITY LOW, ISOLATION LEVEL SERIALIZABLE"
	}
	return fmt.Sprintf("%s; SET LOCAL lock_timeout = %d; SET LOCAL statement_timeout = %d",
		begin, max(lockTimeout.Milliseconds(), 1), max(statementTimeout.Milliseconds(), 1))
}
