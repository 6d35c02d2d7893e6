package sqlcheck

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/sem/tree"

	"github.com/inboxd/inboxd/internal/release"
	"github.com/inboxd/inboxd/schema"
)

// contracting reads sql with CockroachDB's parser and says why it is not expand-only,
// or "": anything that makes the previous release fail on the new schema during a
// rolling upgrade. That is a dropped, renamed or retyped object, deleted rows, a
// constraint the previous release's writes may break (SET NOT NULL, a new constraint,
// a unique index, a new primary key), or a new NOT NULL column without a default,
// which its inserts do not fill. A statement the parser cannot read is contracting
// too: what cannot be read cannot be vouched for.
func contracting(sql string) string {
	stmts, err := parser.Parse(sql)
	if err != nil {
		return fmt.Sprintf("not readable by CockroachDB's parser (%v)", err)
	}
	for _, st := range stmts {
		if why := contractingStmt(st.AST); why != "" {
			return why
		}
	}
	return ""
}

func contractingStmt(stmt tree.Statement) string {
	switch n := stmt.(type) {
	case *tree.CreateTable, *tree.Insert, *tree.Update, *tree.SetVar, *tree.CommentOnColumn,
		*tree.CommentOnTable, *tree.CommentOnIndex, *tree.Grant, *tree.Select:
		return ""
	case *tree.CreateIndex:
		if n.Unique {
			return "CREATE UNIQUE INDEX"
		}
		return ""
	case *tree.Truncate:
		return "TRUNCATE"
	case *tree.Delete:
		return "DELETE"
	case *tree.RenameTable, *tree.RenameIndex, *tree.RenameColumn, *tree.RenameDatabase:
		return "RENAME"
	case *tree.AlterTable:
		for _, cmd := range n.Cmds {
			if why := contractingCmd(cmd); why != "" {
				return why
			}
		}
		return ""
	}
	tag := stmt.StatementTag()
	switch {
	case strings.HasPrefix(tag, "DROP"):
		return tag
	case strings.HasPrefix(tag, "ALTER"):
		// Another ALTER (of an index, a type, a sequence…): read as written.
		text := " " + strings.ToUpper(tree.AsString(stmt)) + " "
		for _, word := range []string{" DROP ", " RENAME ", " TYPE ", " NOT NULL "} {
			if strings.Contains(text, word) {
				return tag + strings.TrimRight(word, " ")
			}
		}
		return ""
	}
	return ""
}

func contractingCmd(cmd tree.AlterTableCmd) string {
	switch c := cmd.(type) {
	case *tree.AlterTableAddColumn:
		d := c.ColumnDef
		switch {
		case d.Nullable.Nullability == tree.NotNull && !d.HasDefaultExpr() && !d.IsComputed():
			return "ADD COLUMN … NOT NULL without DEFAULT"
		case d.PrimaryKey.IsPrimaryKey:
			return "ADD COLUMN … PRIMARY KEY"
		case d.Unique.IsUnique:
			return "ADD COLUMN … UNIQUE"
		case len(d.CheckExprs) > 0:
			return "ADD COLUMN … CHECK"
		case d.HasFKConstraint():
			return "ADD COLUMN … REFERENCES"
		}
		return ""
	case *tree.AlterTableAddConstraint:
		return "ADD CONSTRAINT"
	case *tree.AlterTableAlterColumnType:
		return "ALTER COLUMN … TYPE"
	case *tree.AlterTableSetNotNull:
		return "SET NOT NULL"
	case *tree.AlterTableAlterPrimaryKey:
		return "ALTER PRIMARY KEY"
	case *tree.AlterTableRenameColumn, *tree.AlterTableRenameConstraint:
		return "RENAME"
	case *tree.AlterTableDropColumn, *tree.AlterTableDropConstraint, *tree.AlterTableDropNotNull,
		*tree.AlterTableDropStored, *tree.AlterTableDropIdentity:
		return "DROP"
	case *tree.AlterTableSetDefault, *tree.AlterTableSetStorageParams, *tree.AlterTableResetStorageParams,
		*tree.AlterTableValidateConstraint, *tree.AlterTableSetOnUpdate:
		return ""
	}
	// A command not known here is not vouched for.
	return fmt.Sprintf("ALTER TABLE %s (not known to the expand-only rule)", cmd.TelemetryName())
}

// The classifier finds each kind of contracting statement, whatever its spelling, and
// passes expanding ones.
func TestContractingClassifier(t *testing.T) {
	for _, tc := range []struct {
		sql         string
		contracting bool
	}{
		{"DROP INDEX IF EXISTS journal_pending", true},
		{"DROP TABLE journal", true},
		{"ALTER TABLE journal DROP COLUMN x", true},
		{"ALTER TABLE journal DROP CONSTRAINT c", true},
		{"ALTER TABLE journal ALTER COLUMN a DROP NOT NULL", true},
		{"ALTER TABLE journal RENAME COLUMN a TO b", true},
		{"ALTER TABLE journal RENAME TO j", true},
		{"ALTER INDEX journal_x RENAME TO journal_y", true},
		{"ALTER TABLE journal ALTER COLUMN a TYPE BIGINT", true},
		{"ALTER TABLE journal ALTER COLUMN a SET DATA TYPE BIGINT", true},
		{"ALTER TABLE journal ALTER COLUMN a SET NOT NULL", true},
		{"ALTER TABLE journal ALTER a SET NOT NULL", true},
		{"ALTER TABLE journal ADD COLUMN b INT NOT NULL", true},
		{"ALTER TABLE journal ADD b INT NOT NULL", true},
		{"ALTER TABLE journal ADD COLUMN c NUMERIC(10,2) NOT NULL", true},
		{"ALTER TABLE journal ADD COLUMN d INT DEFAULT 0 CHECK (d > 0)", true},
		{"ALTER TABLE journal ADD COLUMN e TEXT UNIQUE", true},
		{"ALTER TABLE journal ADD COLUMN f UUID REFERENCES customers (id)", true},
		{"ALTER TABLE journal ADD COLUMN IF NOT EXISTS g TEXT, ADD COLUMN h INT NOT NULL", true},
		{"ALTER TABLE journal ADD CONSTRAINT c CHECK (a > 0)", true},
		{"ALTER TABLE journal ADD CONSTRAINT u UNIQUE (event_type)", true},
		{"ALTER TABLE journal ALTER PRIMARY KEY USING COLUMNS (id)", true},
		{"CREATE UNIQUE INDEX journal_u ON journal (event_type)", true},
		{"CREATE UNIQUE INDEX IF NOT EXISTS journal_u ON journal (event_type)", true},
		{"TRUNCATE journal", true},
		{"DELETE FROM journal WHERE true", true},
		{"this is not SQL", true},
		{"ALTER TABLE journal ADD COLUMN IF NOT EXISTS b INT NOT NULL DEFAULT 0", false},
		{"ALTER TABLE journal ADD COLUMN IF NOT EXISTS c TEXT", false},
		{"ALTER TABLE journal ADD COLUMN IF NOT EXISTS c NUMERIC(10,2)", false},
		{"ALTER TABLE journal ADD COLUMN IF NOT EXISTS d INT8 DEFAULT 0", false},
		{"ALTER TABLE journal ALTER COLUMN d SET DEFAULT 1", false},
		{"CREATE INDEX IF NOT EXISTS journal_x ON journal (status)", false},
		{"CREATE INDEX IF NOT EXISTS journal_p ON journal (status) WHERE status = 'RECEIVED'", false},
		{"CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, v TEXT NOT NULL UNIQUE, CHECK (id > 0))", false},
		{"UPDATE journal SET attempts = 0 WHERE attempts IS NULL", false},
		{"INSERT INTO t (id) VALUES (1) ON CONFLICT DO NOTHING", false},
		{"ALTER TABLE journal SET (ttl_expiration_expression = 'x', ttl_job_cron = 'y')", false},
	} {
		why := contracting(tc.sql)
		if got := why != ""; got != tc.contracting {
			t.Errorf("contracting(%q) = %q, want contracting: %v", tc.sql, why, tc.contracting)
		}
	}
}

// Every migration after the last release's only expands the schema (the expand-only
// rule): the previous release runs on it during a rolling upgrade. A contracting
// migration must be marked "-- inboxd:contract" and named in CHANGELOG.md, where its
// release says it contracts. Statements are read as CockroachDB's parser reads them,
// both databases' statements alike (a PostgreSQL-only one it cannot read counts as
// contracting). It fails on 0016 (DROP INDEX) when RELEASES is made to end at 0015.
func TestMigrationsExpandOnly(t *testing.T) {
	root := moduleRoot(t)
	rel, err := release.Last(filepath.Join(root, "RELEASES"))
	if err != nil {
		t.Fatal(err)
	}
	version, last := rel.Version, rel.LastMigration
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
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
					"a contracting release marks it -- inboxd:contract and names it in CHANGELOG.md: %s", m.Name, why, version, last, oneLine(st.SQL))
			case !strings.Contains(string(changelog), m.Name):
				t.Errorf("%s is marked contracting, but CHANGELOG.md does not name it", m.Name)
			}
		}
	}
}
