package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/buildinfo"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/schema"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(args, &out, &errOut, Options{})
	return code, out.String(), errOut.String()
}

func TestMain(m *testing.M) { testenv.Main(m) }

// TestCommandLine runs Main's help, usage errors and refusals, each with its exit code.
func TestCommandLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string // in stdout or stderr
	}{
		{"help lists commands", []string{"help"}, 0, "changefeed"},
		{"version", []string{"version"}, 0, "inboxd " + buildinfo.Version + " (revision "},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"bad flag", []string{"migrate", "-no-such-flag"}, 2, "flag provided but not defined"},
		{"invalid config", []string{"serve", "-ack-mode", "auto"}, 1, "ack-mode"},
		{"changefeed needs an action", []string{"changefeed"}, 2, "create|status|pause|resume|cancel"},
		{"serve help names env vars", []string{"serve", "-h"}, 2, "INBOXD_DATABASE_URL"},
		{"non-durable topic refused at start", []string{"serve", "-destination", "/topic/registrations", "-client-id", ""}, 1,
			"would subscribe non-durably and silently lose every event"},
		{"subscriptions needs an action", []string{"subscriptions"}, 2, "list [-json] | remove"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := run(t, tt.args...)
			if code != tt.wantCode || !strings.Contains(out+errOut, tt.wantOut) {
				t.Errorf("exit %d, output %q%q; want exit %d mentioning %q", code, out, errOut, tt.wantCode, tt.wantOut)
			}
		})
	}
}

func TestChangefeedOnPostgreSQL(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	code, _, errOut := run(t, "changefeed", "status", "-database-url", db.URL)
	if code != 1 || !strings.Contains(errOut, "need CockroachDB") {
		t.Errorf("status on PostgreSQL: exit %d, %q; want a clear CockroachDB-only error", code, errOut)
	}
	code, out, _ := run(t, "changefeed", "create", "-if-cockroachdb", "-database-url", db.URL)
	if code != 0 || !strings.Contains(out, "not CockroachDB") {
		t.Errorf("create -if-cockroachdb on PostgreSQL: exit %d, %q", code, out)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	for i, want := range []string{"schema is up to date", "schema is up to date"} {
		code, out, errOut := run(t, "migrate", "-database-url", db.URL)
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("run %d: exit %d, %q %q", i, code, out, errOut)
		}
	}
}

// serve changes no schema unless INBOXD_MIGRATE=auto: on an empty database it exits at
// once, naming the missing migrations and inboxd migrate, and creates nothing; with
// -demo and no customers table it names inboxd migrate -demo. Before issue 27 it
// migrated, which a role without DDL rights could not.
func TestServeRefusesASchemaBehind(t *testing.T) {
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	migrated := testenv.NewDB(t) // inboxd's schema, not the demo's table
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "-database-url", db.URL, "-http-addr", ""}, "migrations 0001_journal.sql, 0003_feed_watermark.sql, "},
		{[]string{"serve", "-database-url", db.URL, "-demo"}, `run "inboxd migrate"`},
		{[]string{"serve", "-database-url", migrated.URL, "-demo"}, "inboxd migrate -demo"},
	} {
		code, out, errOut := run(t, tt.args...)
		if code != 1 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%v: exit %d, %q %q; want 1 and %q", tt.args, code, out, errOut, tt.want)
		}
	}
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("serve created %d tables (%v), want none", n, err)
	}
}

// migrate -print-grants prints, without a database, the DML-only grants of a runtime
// role (TestRuntimeRoleNeedsOnlyDML applies them), the demo's table with -demo, and
// what changefeed create needs on CockroachDB, commented out.
func TestMigratePrintGrants(t *testing.T) {
	code, out, errOut := run(t, "migrate", "-print-grants", "app", "-demo", "-database-url", "postgres://nowhere.invalid/x")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "journal", `, `, "journal_state", `, `"customers" TO "app";`,
		`GRANT SELECT ON TABLE schema_migrations TO "app";`, `GRANT USAGE, SELECT, UPDATE ON SEQUENCE "journal_sequence_no", "outbox_seq" TO "app";`,
		`-- GRANT CHANGEFEED ON TABLE journal, outbox TO "app";`, `-- GRANT SYSTEM VIEWJOB, CONTROLJOB TO "app";`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if u := strings.ToUpper(line); !strings.HasPrefix(line, "--") && (strings.Contains(u, "CREATE") || strings.Contains(u, " ALL ")) {
			t.Errorf("grant beyond DML: %s", line)
		}
	}
}

func TestRetryableAtStart(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("migrating: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		err  error
		want bool
	}{
		{errors.New("dial tcp 127.0.0.1:5432: connect: connection refused"), true},
		{pg("57P03"), true}, // the database system is starting up
		{pg("3D000"), true}, // no such database (yet)
		// Migrations no longer collide (the migration lock): a duplicate object is a bug.
		{pg("42710"), false},
		{pg("42P07"), false},
		{pg("42P01"), false}, // a missing table: run inboxd migrate
		{fmt.Errorf("x: %w", &schema.VersionError{Missing: []string{"0001_journal.sql"}}), false},
		{pg("42601"), false}, // a syntax error in a migration
		{pg("22P02"), false},
	}
	for _, tt := range tests {
		if got := retryableAtStart(tt.err); got != tt.want {
			t.Errorf("retryableAtStart(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

// TestMigrateReportsOnlyWhatItApplied: on an empty database "inboxd migrate" names the
// migrations that changed the schema, not a retired one that does nothing (the demo's
// old customers table, created only by -demo).
func TestMigrateReportsOnlyWhatItApplied(t *testing.T) {
	t.Parallel()
	db := testenv.NewDBWith(t, testenv.DBOptions{Empty: true})
	code, out, errOut := run(t, "migrate", "-database-url", db.URL)
	if code != 0 || !strings.Contains(out, "applied 0001_journal.sql") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	if strings.Contains(out, "customers") {
		t.Errorf("migrate without -demo reports the customers table:\n%s", out)
	}
}

// TestCommandHelpIsItsOwn: a command's -h lists its own flags and the settings it uses,
// grouped under headings; publish's is short and lacks serve's processing settings.
func TestCommandHelpIsItsOwn(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cmd      string
		maxLines int
		want     []string
		not      []string
	}{
		{"publish", 100, []string{"\n  -n int", "\n  -verify\n", "\n  -body string", "\n  -header value", "Broker:", "\n  -database-url"},
			[]string{"-batch-size", "-concurrency", "-http-addr", "Processing:"}},
		{"serve", 400, []string{"\nDatabase:\n", "\nBroker:\n", "\nProcessing:\n", "\nLogging:\n", "\n  -batch-size", "\n  -no-handler"}, []string{"\n  -verify"}},
		{"migrate", 60, []string{"\n  -print-grants", "\n  -demo", "\n  -retention"}, []string{"-stomp-addr", "-concurrency"}},
	} {
		t.Run(tt.cmd, func(t *testing.T) {
			code, out, errOut := run(t, tt.cmd, "-h")
			help := out + errOut
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if n := strings.Count(help, "\n"); n > tt.maxLines {
				t.Errorf("%s -h is %d lines, want at most %d:\n%s", tt.cmd, n, tt.maxLines, help)
			}
			for _, w := range tt.want {
				if !strings.Contains(help, w) {
					t.Errorf("%s -h lacks %q:\n%s", tt.cmd, w, help)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(help, w) {
					t.Errorf("%s -h shows %q, which it does not use", tt.cmd, w)
				}
			}
		})
	}
}
