package cli

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/database"
)

// checkServerVersion refuses a CockroachDB older than database.MinVersion, reading the
// crdb_version parameter CockroachDB reports at connection start (database.VersionParam).
// PostgreSQL reports none and passes.
// On a release whose CDC queries still need an Enterprise license key, it says so on w.
func checkServerVersion(ctx context.Context, pool *pgxpool.Pool, w io.Writer) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connecting to the database: %w", err)
	}
	raw := c.Conn().PgConn().ParameterStatus(database.VersionParam)
	c.Release()
	v, err := database.CheckVersion(raw)
	if err != nil {
		return err
	}
	if raw != "" && v.CDCQueriesNeedLicense() {
		fmt.Fprintf(w, "note: CockroachDB %s needs an Enterprise license key for changefeeds into a sink and CDC queries "+
			"(no key is needed from v24.1.7, v24.2.5 and v24.3.0 on)\n", v)
	}
	return nil
}
