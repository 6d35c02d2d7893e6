package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/config"
)

// ensureDatabase creates the database named in the configured URL when it does not
// exist yet, so that "inboxd migrate" works on a fresh server. It connects to the
// server's default database to do so and changes nothing when the database exists.
func ensureDatabase(ctx context.Context, cfg *config.Config) error {
	cc, err := cfg.ConnConfig()
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connecting to the database: %w", err)
	}
	name := cc.Database
	ac := cc.Copy()
	ac.Database = "postgres"
	admin, aerr := pgx.ConnectConfig(ctx, ac)
	if aerr != nil {
		return fmt.Errorf("database %q does not exist, and creating it failed: %w", name, aerr)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		// Another instance starting at the same moment created it first: 42P04, or on
		// PostgreSQL a unique violation of pg_database's name index.
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
			return nil
		}
		return fmt.Errorf("creating database %q: %w", name, err)
	}
	return nil
}

// openPool connects a pool with the configured URL and database password, of at least
// minConns connections (0: pgxpool's own size).
func openPool(ctx context.Context, cfg *config.Config, minConns int32) (*pgxpool.Pool, error) {
	pc, err := cfg.PoolConfig()
	if err != nil {
		return nil, err
	}
	pc.MaxConns = max(pc.MaxConns, minConns)
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	return pool, nil
}
