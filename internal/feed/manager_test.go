package feed

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/testenv"
)

// On PostgreSQL every operation must refuse with ErrNeedsCockroachDB, and must not run
// anything: the journal stays untouched.
func TestManagerOnPostgreSQL(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	d, err := database.Detect(ctx, db.Pool)
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	if d != database.PostgreSQL {
		t.Fatalf("PostgreSQL detected as %s", d)
	}
	m := NewManager(db.Pool, d, nil)

	opts := DefaultOptions("webhook-https://inboxd:8443/changefeed", testCA, "Bearer t")
	ops := map[string]func() error{
		"Create":           func() error { _, err := m.Create(ctx, opts); return err },
		"List":             func() error { _, err := m.List(ctx); return err },
		"Find":             func() error { _, err := m.Find(ctx, opts.SinkURL); return err },
		"Status":           func() error { _, err := m.Status(ctx, 1); return err },
		"Pause":            func() error { return m.Pause(ctx, 1) },
		"Resume":           func() error { return m.Resume(ctx, 1) },
		"Cancel":           func() error { return m.Cancel(ctx, 1) },
		"EnableRangefeeds": func() error { return m.EnableRangefeeds(ctx) },
		"ApplyRetention":   func() error { _, err := m.ApplyRetention(ctx, Retention{Journal: time.Hour}); return err },
	}
	for name, op := range ops {
		t.Run(name, func(t *testing.T) {
			if err := op(); !errors.Is(err, ErrNeedsCockroachDB) {
				t.Errorf("%s = %v, want ErrNeedsCockroachDB", name, err)
			}
		})
	}

	// Invalid options are reported as such before the dialect check.
	if _, err := m.Create(ctx, Options{SinkURL: "https://x"}); !errors.Is(err, ErrInvalidOptions) {
		t.Errorf("Create(invalid) = %v, want ErrInvalidOptions", err)
	}
}

// On CockroachDB a database error is reported as such, not as ErrNeedsCockroachDB.
func TestManagerDatabaseDown(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	m := NewManager(db.Pool, database.CockroachDB, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.Pause(ctx, 1); err == nil || errors.Is(err, ErrNeedsCockroachDB) {
		t.Errorf("Pause on a canceled context = %v, want the context error", err)
	}
}
