package sqlcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"

	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/schema"
)

// runtimeSites are the calls whose SQL is assembled at run time, each with the
// representative statements that stand for it (or why none is needed).
var runtimeSites = map[string]func() []journal.Statement{
	"internal/journal/List":              builtPrefix("List/"),
	"internal/journal/CountMatching":     builtPrefix("CountMatching/"),
	"internal/journal/Requeue":           builtPrefix("Requeue/"),
	"internal/journal/ListQuarantine":    builtPrefix("ListQuarantine/"),
	"internal/journal/LockPickedOpening": builtPrefix("ClaimHeads/"),
	"internal/journal/ClaimDue":          builtPrefix("ClaimDue"),
	"internal/journal/lockOpening":       builtPrefix("LockOpening/"),
	// The timeouts of every processing transaction (timeoutStatements), as setTimeouts
	// sends them one by one and as beginBatchSQL sends them after BEGIN in one query,
	// on CockroachDB.
	"internal/process/setTimeouts": one("beginBatchSQL", "BEGIN ISOLATION LEVEL SERIALIZABLE; "+
		"SET LOCAL statement_timeout = 30000; SET LOCAL enable_durable_locking_for_serializable = on"),
	"internal/feed/create":           feedCreates,
	"internal/feed/Pause":            one("PauseJobSQL", feed.PauseJobSQL(1234)),
	"internal/feed/Resume":           one("ResumeJobSQL", feed.ResumeJobSQL(1234)),
	"internal/feed/Cancel":           one("CancelJobSQL", feed.CancelJobSQL(1234)),
	"internal/feed/ApplyRetention":   feedTTL,
	"internal/feed/RetentionInForce": feedTTL,
	"schema/migrateLocked":           nil, // the migrations, checked as their own group
	// Whether a required release's table holds rows: the table named by the directive.
	"schema/checkRequirement": one("checkRequirement", "SELECT EXISTS (SELECT 1 FROM journal)"),
	"internal/cli/ensureDatabase": func() []journal.Statement {
		return []journal.Statement{{Name: "ensureDatabase", SQL: `CREATE DATABASE "inboxd"`}}
	},
	// The benchmark's scratch databases exist on PostgreSQL only (it measures against
	// the local PostgreSQL); DROP DATABASE … WITH (FORCE) is PostgreSQL syntax.
	"internal/bench/newDB": nil,
	// The shadow row's table checksums: the bench measures against PostgreSQL only
	// (r::TEXT of a whole row is PostgreSQL's).
	"internal/bench/tableChecksums": nil,
	// A take's statement timeout, before the take itself.
	"schema/withLease":    one("takeTimeout", "SET statement_timeout = 10000"),
	"internal/bench/drop": nil,
}

func builtPrefix(prefix string) func() []journal.Statement {
	return func() []journal.Statement {
		var out []journal.Statement
		for _, s := range journal.BuiltStatements() {
			if strings.HasPrefix(s.Name, prefix) {
				out = append(out, s)
			}
		}
		return out
	}
}

const testCA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENCK3dJSkFLSGhrZz09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"

func feedCreates() []journal.Statement {
	def := feed.DefaultOptions("webhook-https://inboxd:8443/changefeed", testCA, "Bearer s3cret")
	table := def
	table.Mode = feed.ModeTable
	table.Diff = true
	resume := def
	resume.CACertBase64, resume.InsecureSkipVerify = "", true
	resume.Cursor = "1629813621680097993.0000000000"
	resume.InitialScan = "no"
	var out []journal.Statement
	for name, o := range map[string]feed.Options{"filtered": def, "table": table, "cursor": resume} {
		s, err := feed.BuildCreate(o)
		if err != nil {
			panic(err)
		}
		out = append(out, journal.Statement{Name: "BuildCreate/" + name, SQL: s})
	}
	ob, err := feed.BuildOutboxCreate(def)
	if err != nil {
		panic(err)
	}
	out = append(out, journal.Statement{Name: "BuildOutboxCreate", SQL: ob})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// pgOnlySites send statements CockroachDB does not have, and only to PostgreSQL: the
// code checks the database first. Each is named with the reason.
var pgOnlySites = map[string]string{
	"schema/withLock":             "pg_advisory_lock/unlock: the migration lock on PostgreSQL; on CockroachDB withLock takes the lease row instead (withLease, whose statements are checked)",
	"internal/replay/tableWrites": "pg_stat_xact_user_tables: a shadow run's rows written per table, read on PostgreSQL only (shadowOne checks the Dialect); CockroachDB has no such view",
	"internal/notifier/listen":    "LISTEN/UNLISTEN: the notifier runs on PostgreSQL only (the client starts it only there, and it refuses CockroachDB, whose changefeeds wake push and the relay)",
}

func one(name, sql string) func() []journal.Statement {
	return func() []journal.Statement { return []journal.Statement{{Name: name, SQL: sql}} }
}

func feedTTL() []journal.Statement {
	var out []journal.Statement
	// The defaults, none, and an embedder's own (Config.Retention, QuarantineRetention).
	for _, r := range []feed.Retention{{Journal: 168 * time.Hour, Quarantine: 720 * time.Hour}, {}, {Journal: 72 * time.Hour, Quarantine: 14 * 24 * time.Hour}} {
		stmts, err := feed.RetentionStatements(r)
		if err != nil {
			panic(err)
		}
		for _, st := range stmts {
			out = append(out, journal.Statement{Name: "RetentionStatements", SQL: st})
		}
	}
	// ApplyRetention and RetentionInForce (Run's check) read the definitions with it.
	return append(out, journal.Statement{Name: "showCreate", SQL: "SELECT create_statement FROM [SHOW CREATE TABLE journal]"},
		journal.Statement{Name: "showCreate", SQL: "SELECT create_statement FROM [SHOW CREATE TABLE quarantine]"})
}

// productModule is the module whose SQL the test checks; this test's own module (its
// go.mod keeps the parser out of the product's) sits inside it, two levels down.
const productModule = "github.com/inboxd/inboxd"

// moduleRoot is the directory of productModule's go.mod: the nearest go.mod above the
// test that declares it, passing over this test's own.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == productModule {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod of %s above the test", productModule)
		}
		dir = parent
	}
}

// modulePath is the path a go.mod's module directive declares.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// migrations returns schema's migrations as CockroachDB runs them, and their SQL alone:
// a statement marked "-- inboxd:only postgresql" (its CockroachDB twin follows it) never
// reaches CockroachDB, so it is left out, and logged.
func migrations(t *testing.T) ([]schema.Migration, []string) {
	t.Helper()
	migs, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	var sql []string
	for i, m := range migs {
		stmts, err := schema.Statements(m.SQL)
		if err != nil {
			t.Fatalf("%s: %v", m.Name, err)
		}
		var kept []string
		for _, st := range stmts {
			if !st.RunsOn(schema.CockroachDB) {
				t.Logf("skip %s (PostgreSQL only): %s", m.Name, oneLine(st.SQL))
				continue
			}
			kept = append(kept, st.SQL)
		}
		migs[i].SQL = strings.Join(kept, "\n")
		sql = append(sql, migs[i].SQL)
	}
	return migs, sql
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestEveryStatementOnCockroachDB parses every SQL statement inboxd sends with
// CockroachDB 25.2's parser and type-checks each expression that holds a placeholder,
// with untyped placeholders (see checker). The statements are: the migrations; every
// constant statement at a pgx call site in the product's source (found by reading the
// source, so a new one cannot be forgotten); and, for each call site whose SQL is
// assembled at run time, the statements its builder makes for representative inputs.
// A call site of an unknown kind fails the test until it is listed in runtimeSites.
func TestEveryStatementOnCockroachDB(t *testing.T) {
	migs, migSQL := migrations(t)
	sites, err := harvest(moduleRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	// Tables created outside the migrations (schema_migrations) are known too.
	tables := append([]string{}, migSQL...)
	for _, s := range sites {
		if strings.HasPrefix(strings.TrimSpace(s.SQL), "CREATE TABLE") {
			tables = append(tables, s.SQL)
		}
	}
	c, err := newChecker(tables)
	if err != nil {
		t.Fatal(err)
	}

	type item struct{ group, name, sql string }
	var items []item
	for _, m := range migs {
		items = append(items, item{"migrations", m.Name, m.SQL})
	}
	used := map[string]bool{}
	for _, s := range sites {
		if why, ok := pgOnlySites[s.Func]; ok {
			used["pgOnly:"+s.Func] = true
			t.Logf("skip %s: %s", s.Where, why)
			continue
		}
		if s.SQL != "" {
			group := strings.SplitN(s.Where, "/", 3)
			g := group[0]
			if len(group) > 2 && g == "internal" {
				g = group[1]
			}
			items = append(items, item{"source:" + g, s.Where, s.SQL})
			continue
		}
		build, ok := runtimeSites[s.Func]
		if !ok {
			t.Errorf("%s sends SQL assembled at run time: add it to runtimeSites with representative statements", s.Where)
			continue
		}
		if used[s.Func] {
			continue
		}
		used[s.Func] = true
		if build == nil {
			continue
		}
		for _, st := range build() {
			items = append(items, item{"built:" + s.Func, st.Name, st.SQL})
		}
	}
	for k := range pgOnlySites {
		if !used["pgOnly:"+k] {
			t.Errorf("pgOnlySites lists %s, which no longer sends SQL: remove it", k)
		}
	}
	for k := range runtimeSites {
		if !used[k] {
			t.Errorf("runtimeSites lists %s, which no longer sends SQL: remove it", k)
		}
	}

	counts := map[string][3]int{}
	var total result
	for _, it := range items {
		r, err := c.check(it.sql)
		if err != nil {
			t.Errorf("%s %s: %v\n\t%s", it.group, it.name, err, oneLine(it.sql))
			continue
		}
		t.Logf("ok  %-28s %-52s %d stmt, %d placeholder expr: %.160s", it.group, it.name, r.Statements, r.Expressions, oneLine(it.sql))
		n := counts[it.group]
		n[0] += r.Statements
		n[1] += r.Expressions
		n[2] += r.Placeholders
		counts[it.group] = n
		total.Statements += r.Statements
		total.Expressions += r.Expressions
		total.Placeholders += r.Placeholders
	}
	var groups []string
	for g := range counts {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var b strings.Builder
	for _, g := range groups {
		fmt.Fprintf(&b, "\n  %-40s %4d statements, %4d placeholder expressions type-checked, %4d placeholders", g, counts[g][0], counts[g][1], counts[g][2])
	}
	t.Logf("summary: %d statements parsed, %d expressions with placeholders type-checked, %d placeholders typed:%s",
		total.Statements, total.Expressions, total.Placeholders, b.String())
	if total.Statements < 50 {
		t.Errorf("only %d statements found: the harvest is broken", total.Statements)
	}
}

// The grants "inboxd migrate -print-grants" prints parse on CockroachDB: the runtime
// role's, and those changefeed create needs.
func TestGrantsOnCockroachDB(t *testing.T) {
	grants, err := schema.Grants("inboxd_app", "customers")
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range append(grants, schema.ChangefeedGrants("inboxd_app")...) {
		if _, err := parser.Parse(g); err != nil {
			t.Errorf("CockroachDB refuses %q: %v", g, err)
		}
	}
}

// TestCheckerRejectsUntypedPlaceholders pins the checker on the statements CockroachDB's
// server is known to reject when pgx prepares them (finding 1 of issue 9): a checker
// that accepted these would prove nothing.
func TestCheckerRejectsUntypedPlaceholders(t *testing.T) {
	_, migSQL := migrations(t)
	c, err := newChecker(migSQL)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, sql, want string }{
		{"MarkFailed before the fix", `UPDATE journal SET status = 'FAILED', attempts = attempts + 1, last_error = $2,
		       next_attempt_at = now() + $3 * INTERVAL '1 millisecond', updated_at = now()
		WHERE id = $1`, "unsupported binary operator: <interval> * <interval>"},
		{"ClaimDue before the fix", `UPDATE journal SET next_attempt_at = now() + $3 * INTERVAL '1 millisecond'
		WHERE id IN (SELECT id FROM journal WHERE status IN ('RECEIVED', 'FAILED') AND next_attempt_at <= now()
			  AND (status = 'FAILED' OR next_attempt_at <= now() - $1 * INTERVAL '1 millisecond')
			ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING id::TEXT, status, aggregate_id, sequence_no`, "unsupported binary operator: <interval> * <interval>"},
		{"bare placeholder", `SELECT $1`, "could not determine data type of placeholder $1"},
		{"not CockroachDB syntax", `DROP DATABASE x WITH (FORCE)`, "syntax error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.check(tt.sql)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("check = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
