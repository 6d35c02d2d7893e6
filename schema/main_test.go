package schema_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/registration"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(migratorEnv); url != "" {
		os.Exit(migrator(url))
	}
	testenv.Main(m)
}

// migratorEnv makes the test binary a migrator process (TestConcurrentStartersMigrateOnce):
// it migrates the database at that URL as "inboxd migrate -demo" and "inboxd serve" with
// INBOXD_MIGRATE=auto and -demo do, prints each migration it applied on a line, and
// exits 1 on an error.
const migratorEnv = "INBOXD_TEST_MIGRATOR_URL"

// migratorAtEnv is the instant (Unix nanoseconds) every migrator starts at.
const migratorAtEnv = "INBOXD_TEST_MIGRATOR_AT"

func migrator(url string) int {
	if at, err := strconv.ParseInt(os.Getenv(migratorAtEnv), 10, 64); err == nil {
		time.Sleep(time.Until(time.Unix(0, at))) // the start gate, not a wait for an outcome
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	applied, err := schema.Migrate(ctx, pool, registration.Migrate)
	for _, name := range applied {
		fmt.Println(name)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
