package schema_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/release"
	"github.com/inboxd/inboxd/schema"
)

// contractingRE finds what a migration must not do within a release line: anything
// that makes the previous release fail on the new schema (a dropped, renamed or retyped
// object, deleted rows, a constraint its writes may break, a new NOT NULL column it does
// not fill).
var contractingRE = []struct {
	re   *regexp.Regexp
	what string
}{
	{regexp.MustCompile(`(?i)\bDROP\b`), "DROP"},
	{regexp.MustCompile(`(?i)\bRENAME\b`), "RENAME"},
	{regexp.MustCompile(`(?i)\bALTER\s+(COLUMN\s+)?\w+\s+(SET\s+DATA\s+)?TYPE\b`), "ALTER … TYPE"},
	{regexp.MustCompile(`(?i)\bTRUNCATE\b`), "TRUNCATE"},
	{regexp.MustCompile(`(?i)\bDELETE\s+FROM\b`), "DELETE"},
	{regexp.MustCompile(`(?i)\bSET\s+NOT\s+NULL\b`), "SET NOT NULL"},
	{regexp.MustCompile(`(?i)\bADD\s+CONSTRAINT\b`), "ADD CONSTRAINT"},
	{regexp.MustCompile(`(?i)\bALTER\s+PRIMARY\s+KEY\b`), "ALTER PRIMARY KEY"},
}

// An added column that is NOT NULL without a DEFAULT fails the previous release's
// inserts.
var (
	addColumnRE = regexp.MustCompile(`(?is)\bADD\s+COLUMN\b[^,;]*`)
	notNullRE   = regexp.MustCompile(`(?i)\bNOT\s+NULL\b`)
	defaultRE   = regexp.MustCompile(`(?i)\bDEFAULT\b`)
)

// contracting says why stmt is not expand-only, or "".
func contracting(stmt string) string {
	for _, c := range contractingRE {
		if c.re.MatchString(stmt) {
			return c.what
		}
	}
	for _, col := range addColumnRE.FindAllString(stmt, -1) {
		if notNullRE.MatchString(col) && !defaultRE.MatchString(col) {
			return "ADD COLUMN … NOT NULL without DEFAULT"
		}
	}
	return ""
}

// The classifier finds each kind of contracting statement and passes expanding ones.
func TestContractingClassifier(t *testing.T) {
	for stmt, want := range map[string]bool{
		"DROP INDEX IF EXISTS journal_pending;":                                          true,
		"ALTER TABLE journal DROP COLUMN x;":                                             true,
		"ALTER TABLE journal RENAME COLUMN a TO b;":                                      true,
		"ALTER TABLE journal ALTER COLUMN a TYPE BIGINT;":                                true,
		"ALTER TABLE journal ALTER COLUMN a SET DATA TYPE BIGINT;":                       true,
		"ALTER TABLE journal ALTER COLUMN a SET NOT NULL;":                               true,
		"ALTER TABLE journal ADD COLUMN b INT NOT NULL;":                                 true,
		"ALTER TABLE journal ADD CONSTRAINT c CHECK (a > 0);":                            true,
		"TRUNCATE journal;":                                                              true,
		"DELETE FROM journal WHERE true;":                                                true,
		"CREATE UNIQUE INDEX IF NOT EXISTS journal_u ON journal (event_type);":           true,
		"ALTER TABLE journal ADD b INT NOT NULL;":                                        true,
		"ALTER TABLE journal ADD COLUMN c NUMERIC(10,2) NOT NULL;":                       true,
		"ALTER TABLE journal ADD COLUMN d INT DEFAULT 0 CHECK (d > 0);":                  true,
		"ALTER TABLE journal ADD COLUMN IF NOT EXISTS b INT NOT NULL DEFAULT 0;":         false,
		"ALTER TABLE journal ADD COLUMN IF NOT EXISTS c TEXT;":                           false,
		"CREATE INDEX IF NOT EXISTS journal_x ON journal (status);":                      false,
		"CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, v TEXT NOT NULL);":            false,
		"UPDATE journal SET attempts = 0 WHERE attempts IS NULL;":                        false,
		"ALTER TABLE journal SET (ttl_expiration_expression = 'x', ttl_job_cron = 'y');": false,
	} {
		if got := contracting(stmt) != ""; got != want {
			t.Errorf("contracting(%q) = %q, want contracting: %v", stmt, contracting(stmt), want)
		}
	}
}

// Every migration after the last release's only expands the schema (the expand-only
// rule, README "Deploying"): the previous release runs on it during a rolling upgrade.
// A contracting migration must be marked "-- inboxd:contract" and named in
// CHANGELOG.md, where its release says it contracts. It fails on 0016 (DROP INDEX)
// when RELEASES is made to end at 0015.
func TestMigrationsExpandOnly(t *testing.T) {
	rel, err := release.Last("../RELEASES")
	if err != nil {
		t.Fatal(err)
	}
	version, last := rel.Version, rel.LastMigration
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	if schema.ExpandOnlyFrom > last+1 {
		t.Errorf("ExpandOnlyFrom %d: migrations %d to %d, after release %s, would count as contracting", schema.ExpandOnlyFrom, last+1, schema.ExpandOnlyFrom-1, version)
	}
	for _, m := range ms {
		if m.Version <= last {
			continue
		}
		stmts, err := schema.Statements(m.SQL)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range stmts {
			why := contracting(st.SQL)
			if why == "" {
				continue
			}
			switch {
			case !m.Contracts:
				t.Errorf("%s: %s after release %s (migration %d): migrations within a release line only add tables, columns and indexes; "+
					"a contracting release marks it -- inboxd:contract and names it in CHANGELOG.md: %s", m.Name, why, version, last, st.SQL)
			case !strings.Contains(string(changelog), m.Name):
				t.Errorf("%s is marked contracting, but CHANGELOG.md does not name it", m.Name)
			}
		}
	}
}
