package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/schema"
)

// templateVersion is part of the template database's name: raise it when the way
// schema.Migrate applies the same files changes, so that no test copies a database an
// older runner made.
const templateVersion = "1"

// templates caches, per server, the name of the migrated template this process found or
// made.
var templates sync.Map // admin URL → string

// migratedTemplate returns the name of a database on the admin connection's server
// holding every migration of this tree and nothing else, making it first if need be.
// NewDB copies it (CREATE DATABASE … TEMPLATE) instead of migrating each test's database
// anew: the sixteen migrations' DDL was most of PostgreSQL's CPU in make test, hundreds
// of times over. Its name carries a hash of the migrations, so a changed file gets a
// template of its own. Test processes share it: the first one builds it under a
// database-wide advisory lock, under a temporary name renamed only once migrated, so no
// one copies a half-built template.
func migratedTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	key := AdminURL()
	if name, ok := templates.Load(key); ok {
		return name.(string), nil
	}
	migs, err := schema.Migrations()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	h.Write([]byte(templateVersion))
	for _, m := range migs {
		fmt.Fprintf(h, "\x00%s\x00%s", m.Name, m.SQL)
	}
	name := "inboxd_template_" + hex.EncodeToString(h.Sum(nil))[:16]

	if _, err := admin.Exec(ctx, `SELECT pg_advisory_lock(hashtext('inboxd testenv template'))`); err != nil {
		return "", fmt.Errorf("locking the template database: %w", err)
	}
	defer func() {
		_, _ = admin.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('inboxd testenv template'))`)
	}()
	var exists bool
	if err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("looking for the template database: %w", err)
	}
	if !exists {
		if err := buildTemplate(ctx, admin, name); err != nil {
			return "", err
		}
	}
	templates.Store(key, name)
	return name, nil
}

// buildTemplate migrates a new database under a temporary name, then renames it to name.
func buildTemplate(ctx context.Context, admin *pgx.Conn, name string) error {
	building := name + "_building"
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + building + " WITH (FORCE)", "CREATE DATABASE " + building} {
		if _, err := admin.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("making the template database: %s: %w", stmt, err)
		}
	}
	u, err := url.Parse(AdminURL())
	if err != nil {
		return fmt.Errorf("parsing the admin url: %w", err)
	}
	u.Path = "/" + building
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return fmt.Errorf("connecting to the template database: %w", err)
	}
	_, err = schema.Migrate(ctx, pool)
	pool.Close() // a template may have no connections when it is copied or renamed
	if err != nil {
		return fmt.Errorf("migrating the template database: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return fmt.Errorf("publishing the template database: %w", err)
	}
	return nil
}
