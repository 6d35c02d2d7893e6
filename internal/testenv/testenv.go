// Package testenv gives integration tests their real services: a fresh, migrated
// PostgreSQL database per test and the local ActiveMQ broker with a queue of its own.
//
// A test that cannot reach a service skips when run by hand, and fails when CI=true:
// in CI a missing service is a broken pipeline, not a reason to pass.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/schema"
)

// AdminURL is the database the tests connect to in order to create their own.
func AdminURL() string {
	if u := os.Getenv("INBOXD_TEST_ADMIN_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// StompAddr is the broker the tests use.
func StompAddr() string {
	if a := os.Getenv("INBOXD_TEST_STOMP_ADDR"); a != "" {
		return a
	}
	return "127.0.0.1:61613"
}

// Integration marks a test that needs a real service: under -short (make test-short,
// the quick loop) it is skipped, whether or not CI is set, since -short is asked for
// by name. Every helper here that hands out a service calls it first. Outside a test
// binary (inboxdtest.Standalone in a plain program) there is no -short to read:
// testing.Short would panic there.
func Integration(t testing.TB) {
	t.Helper()
	if testing.Testing() && testing.Short() {
		t.Skip("integration test: -short runs only the tests that need no service")
	}
}

// unavailable fails the test in CI and skips it otherwise.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("service unavailable in CI: "+format, args...)
	}
	t.Skipf("service unavailable (set CI=true to fail instead): "+format, args...)
}

// Suffix returns a short random string for naming per-test resources.
func Suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DB is a fresh database for one test.
type DB struct {
	URL  string
	Pool *pgxpool.Pool
}

// OpenPool opens another pool on the test's database, shaped by configure (its size, a
// tracer, a search_path), and closes it with the test.
func (d *DB) OpenPool(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(d.URL)
	if err != nil {
		t.Fatal(err)
	}
	configure(cfg)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DBOptions shape a test database.
type DBOptions struct {
	// Isolation is the database's default_transaction_isolation ("serializable", say);
	// empty: $INBOXD_TEST_DEFAULT_ISOLATION, else PostgreSQL's default (read committed).
	// SERIALIZABLE is CockroachDB's default, so the CockroachDB-faithful profile runs the
	// processing tests with INBOXD_TEST_DEFAULT_ISOLATION=serializable (make test-crdb-profile).
	Isolation string
	// Empty leaves the database unmigrated, for tests of migrating itself.
	Empty bool
}

// readRetrying runs read, a test's own read of the database, again while it fails with
// SQLSTATE 40001, a few dozen times at most. Under SERIALIZABLE (the CockroachDB-faithful
// profile, Serializable) even a one-statement read can be chosen to abort by
// PostgreSQL's SSI or by CockroachDB, and the client must retry it:
// https://www.cockroachlabs.com/docs/stable/transaction-retry-error-reference
// The tries are spaced out (1 ms more each time, up to 20 ms; under a second in all):
// tried back to back, 50 reads of a journal that a webhook storm was rewriting all
// failed within milliseconds (TestDatabaseOutage, 3 of 29 loaded runs of that profile).
func readRetrying(read func() error) error {
	var err error
	for i := range 50 {
		if i > 0 {
			time.Sleep(time.Duration(min(i, 20)) * time.Millisecond) // a retry's backoff, not a wait for an outcome
		}
		err = read()
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "40001" {
			return err
		}
	}
	return err
}

// Observe runs read, a test's own look at the database, in a REPEATABLE READ, read-only
// transaction: one snapshot for all its statements, and no part in the serializable
// isolation of the transactions under test. Under the profile's SERIALIZABLE default
// (Serializable), a test polling the journal took PostgreSQL SSI's read locks (a
// sequential scan locks the whole table) and made the processing transactions it
// watched pivots of conflicts that nothing in the product causes: a changefeed reads
// through rangefeeds, outside any transaction. PostgreSQL's REPEATABLE READ takes no
// such locks and a read-only one never fails to serialize
// (https://www.postgresql.org/docs/15/transaction-iso.html#XACT-REPEATABLE-READ).
// On a transaction (db is a pgx.Tx), read runs in it as it is. A conflict is retried as
// readRetrying does.
func Observe(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, read func(q pgx.Tx) error) error {
	if tx, ok := db.(pgx.Tx); ok {
		return readRetrying(func() error { return read(tx) })
	}
	return readRetrying(func() error {
		tx, err := db.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // read only: nothing to keep
		if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"); err != nil {
			return err
		}
		return read(tx)
	})
}

// Serializable reports whether the test databases default to SERIALIZABLE
// ($INBOXD_TEST_DEFAULT_ISOLATION), CockroachDB's default. Under it a transaction that
// conflicts is rolled back and retried whole, so a handler can run more than once for
// one committed effect; PostgreSQL's serializable isolation also conflicts more than
// CockroachDB's, since it tracks reads by index page rather than by key.
func Serializable() bool {
	return strings.EqualFold(os.Getenv("INBOXD_TEST_DEFAULT_ISOLATION"), "serializable")
}

// NewDB creates a database of its own for the test, migrated (a copy of the migrated
// template, migratedTemplate), and drops it when the test ends. With
// INBOXD_TEST_MESSAGE_LIMIT set (bytes, e.g. 16777216), its Pool connects through a
// LimitProxy that refuses larger client messages as CockroachDB does: the
// CockroachDB-faithful profile's client-message limit.
func NewDB(t testing.TB) *DB {
	t.Helper()
	return NewDBWith(t, DBOptions{})
}

// NewDBWith is NewDB with options.
func NewDBWith(t testing.TB, opts DBOptions) *DB {
	t.Helper()
	Integration(t)
	if opts.Isolation == "" {
		opts.Isolation = os.Getenv("INBOXD_TEST_DEFAULT_ISOLATION")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		unavailable(t, "postgresql at %s: %v", AdminURL(), err)
	}
	defer admin.Close(context.Background())

	name := "inboxd_test_" + Suffix()
	create := "CREATE DATABASE " + name
	if !opts.Empty {
		tmpl, err := migratedTemplate(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		create += " TEMPLATE " + tmpl
	}
	if _, err := admin.Exec(ctx, create); err != nil {
		t.Fatalf("creating database %s: %v", name, err)
	}
	if opts.Isolation != "" {
		// Every session opened afterwards starts with it.
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" SET default_transaction_isolation = "+
			pgx.Identifier{opts.Isolation}.Sanitize()); err != nil {
			t.Fatalf("setting the default isolation of %s: %v", name, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			t.Logf("dropping database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("dropping database %s: %v", name, err)
		}
	})

	u, err := url.Parse(AdminURL())
	if err != nil {
		t.Fatalf("parsing admin url: %v", err)
	}
	u.Path = "/" + name
	if limit := MessageLimitFromEnv(t); limit > 0 {
		u.Host = StartLimitProxy(t, u.Host, limit).Addr
	}
	dbURL := u.String()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatalf("connecting to %s: %v", name, err)
	}
	t.Cleanup(pool.Close)
	return &DB{URL: dbURL, Pool: pool}
}

// MessageLimitFromEnv is INBOXD_TEST_MESSAGE_LIMIT in bytes, or 0 when unset.
func MessageLimitFromEnv(t testing.TB) int {
	v := os.Getenv("INBOXD_TEST_MESSAGE_LIMIT")
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("INBOXD_TEST_MESSAGE_LIMIT=%q: want a positive number of bytes", v)
	}
	return n
}

// Broker checks that the STOMP broker answers and returns its address.
func Broker(t testing.TB) string {
	t.Helper()
	Integration(t)
	conn, err := net.DialTimeout("tcp", StompAddr(), 3*time.Second)
	if err != nil {
		unavailable(t, "activemq stomp at %s: %v (run scripts/services.sh up)", StompAddr(), err)
	}
	conn.Close()
	return StompAddr()
}

// Queue returns a queue name no other test uses.
func Queue(t testing.TB) string {
	t.Helper()
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	if len(name) > 40 {
		name = name[:40]
	}
	return "/queue/inboxd-test." + name + "." + Suffix()
}

// Eventually polls cond every 20ms until it returns true or the deadline passes.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MigrateBefore gives db the schema a release before migration version left: the
// migrations below it (their PostgreSQL statements), recorded in a schema_migrations as
// the releases before serves_from wrote it. For tests of upgrades from old schemas.
func MigrateBefore(t testing.TB, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, version int) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.Exec(ctx, `CREATE TABLE schema_migrations (version INT PRIMARY KEY, name TEXT NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migs {
		if m.Version >= version {
			break
		}
		stmts, err := schema.Statements(m.SQL)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stmts {
			if st.RunsOn(schema.PostgreSQL) {
				if _, err := db.Exec(ctx, st.SQL); err != nil {
					t.Fatalf("%s: %v", m.Name, err)
				}
			}
		}
		if _, err := db.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
			t.Fatal(err)
		}
	}
}
