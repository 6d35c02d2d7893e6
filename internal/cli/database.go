package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ensureDatabase creates the database named in dbURL when it does not exist yet, so
// that "inboxd migrate" works on a fresh server. It connects to the server's default
// database to do so and changes nothing when the database exists.
func ensureDatabase(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err == nil {
		return conn.Close(ctx)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "3D000" { // invalid_catalog_name
		return fmt.Errorf("connecting to the database: %w", err)
	}
	u, perr := url.Parse(dbURL)
	if perr != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	u.Path = "/postgres"
	admin, aerr := pgx.Connect(ctx, u.String())
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
