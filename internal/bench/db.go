package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/schema"
)

// freshDB is a database created for one row and dropped after it, like testenv.NewDB
// but without a testing.T.
type freshDB struct {
	Name, URL string
	adminURL  string
}

func suffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// createDB creates and migrates a database named inboxd_bench_<row>_<random>.
func createDB(ctx context.Context, adminURL, row string) (*freshDB, error) {
	d, err := newDB(ctx, adminURL, row, "")
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, d.URL)
	if err != nil {
		_ = d.drop(ctx)
		return nil, fmt.Errorf("connecting to %s: %w", d.Name, err)
	}
	defer pool.Close()
	if _, err := schema.Migrate(ctx, pool); err != nil {
		pool.Close()
		_ = d.drop(ctx)
		return nil, fmt.Errorf("migrating %s: %w", d.Name, err)
	}
	// The end-to-end rows run the demo's registration handler, which writes customers.
	if err := registration.Migrate(ctx, pool); err != nil {
		pool.Close()
		_ = d.drop(ctx)
		return nil, fmt.Errorf("migrating %s: %w", d.Name, err)
	}
	return d, nil
}

// scratchDB creates and migrates a database for one measurement of row, with a pool of
// one connection for the parent's own reads; done closes the pool and drops the
// database.
func (r *runner) scratchDB(ctx context.Context, row string) (*freshDB, *pgxpool.Pool, func(), error) {
	db, err := createDB(ctx, r.o.AdminURL, row)
	if err != nil {
		return nil, nil, nil, err
	}
	drop := func() {
		if err := db.drop(ctx); err != nil {
			r.logf("%v", err)
		}
	}
	pool, err := openPool(ctx, db.URL, 1)
	if err != nil {
		drop()
		return nil, nil, nil, err
	}
	return db, pool, func() { pool.Close(); drop() }, nil
}

// createDBFrom creates a database named inboxd_bench_<row>_<random> as a copy of
// template (already migrated), which must have no open connection.
func createDBFrom(ctx context.Context, adminURL, row, template string) (*freshDB, error) {
	return newDB(ctx, adminURL, row, template)
}

// newDB creates an empty database named inboxd_bench_<row>_<random>, or a copy of
// template when it is not empty.
func newDB(ctx context.Context, adminURL, row, template string) (*freshDB, error) {
	u, err := url.Parse(adminURL)
	if err != nil {
		return nil, fmt.Errorf("parsing admin url: %w", err)
	}
	name := "inboxd_bench_" + sqlName(row) + "_" + suffix()
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to the admin database: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	create := "CREATE DATABASE " + name
	if template != "" {
		create += " TEMPLATE " + template
	}
	if _, err := admin.Exec(ctx, create); err != nil {
		return nil, fmt.Errorf("creating database %s: %w", name, err)
	}
	u.Path = "/" + name
	return &freshDB{Name: name, URL: u.String(), adminURL: adminURL}, nil
}

// drop removes the database, whatever the state of ctx.
func (d *freshDB) drop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, d.adminURL)
	if err != nil {
		return fmt.Errorf("dropping database %s: %w", d.Name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("dropping database %s: %w", d.Name, err)
	}
	return nil
}

// sqlName keeps the characters of s an unquoted identifier may hold.
func sqlName(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			out = append(out, c)
		case c >= 'A' && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, '_')
		}
	}
	return string(out)
}
