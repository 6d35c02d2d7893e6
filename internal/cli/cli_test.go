package cli

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/testenv"
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
		{pg("42710"), true}, // another instance's migration created the type first
		{pg("42P07"), true},
		{pg("23505"), true},
		{pg("42601"), false}, // a syntax error in a migration
		{pg("22P02"), false},
	}
	for _, tt := range tests {
		if got := retryableAtStart(tt.err); got != tt.want {
			t.Errorf("retryableAtStart(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
