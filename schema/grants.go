package schema

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// createdRE finds the tables and sequences a migration creates.
var createdRE = regexp.MustCompile(`(?i)\bCREATE\s+(TABLE|SEQUENCE)\s+IF\s+NOT\s+EXISTS\s+(\w+)`)

// Objects returns the tables and sequences inboxd's migrations create, in order: what
// a runtime role is granted (Grants).
func Objects() (tables, sequences []string, err error) {
	ms, err := Migrations()
	if err != nil {
		return nil, nil, err
	}
	for _, m := range ms {
		for _, g := range createdRE.FindAllStringSubmatch(m.SQL, -1) {
			if strings.EqualFold(g[1], "TABLE") {
				tables = append(tables, g[2])
			} else {
				sequences = append(sequences, g[2])
			}
		}
	}
	return tables, sequences, nil
}

// Grants returns the statements that give role what "inboxd serve" and Client.Run
// need, on PostgreSQL and CockroachDB alike, and nothing more: SELECT, INSERT, UPDATE
// and DELETE on inboxd's tables and extra (the demo's customers table, say), SELECT on
// schema_migrations (Check), and nextval on its sequences. No DDL: migrations run as
// the schema's owner ("inboxd migrate"). The owner runs them; they are idempotent, so
// they can be applied again after every migrate, which may add tables.
//
// LISTEN and pg_notify need no grant on PostgreSQL: LISTEN checks no privilege
// (https://www.postgresql.org/docs/15/sql-listen.html), and pg_notify is executable by
// PUBLIC; TestRuntimeRoleNeedsOnlyDML runs push through a role with only these grants.
func Grants(role string, extra ...string) ([]string, error) {
	if role == "" {
		return nil, fmt.Errorf("grants: no role named")
	}
	tables, sequences, err := Objects()
	if err != nil {
		return nil, err
	}
	r := pgx.Identifier{role}.Sanitize()
	return []string{
		"GRANT USAGE ON SCHEMA public TO " + r,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE " + identifiers(append(tables, extra...)) + " TO " + r,
		"GRANT SELECT ON TABLE schema_migrations TO " + r,
		"GRANT USAGE, SELECT, UPDATE ON SEQUENCE " + identifiers(sequences) + " TO " + r,
	}, nil
}

// ChangefeedGrants returns what the role that runs "inboxd changefeed create" needs on
// CockroachDB besides Grants (often the owner, not the runtime role):
//   - CHANGEFEED on journal and outbox, to create changefeeds on them (the privilege
//     model since v22.2, https://www.cockroachlabs.com/docs/v24.1/create-changefeed
//     "Required privileges"; the CONTROLCHANGEFEED role option is deprecated since
//     v23.1, cockroachdb/cockroach issue 94757);
//   - VIEWJOB and CONTROLJOB, to list, pause and cancel the changefeed jobs it
//     replaces (create-changefeed, "View and manage changefeed jobs": viewing and
//     managing them through CHANGEFEED is deprecated as of v25.1).
//
// With -enable-rangefeeds (the default) it also sets kv.rangefeed.enabled, which needs
// MODIFYCLUSTERSETTING: pass -enable-rangefeeds=false once an admin has set it.
func ChangefeedGrants(role string) []string {
	r := pgx.Identifier{role}.Sanitize()
	return []string{
		"GRANT CHANGEFEED ON TABLE journal, outbox TO " + r,
		"GRANT SYSTEM VIEWJOB, CONTROLJOB TO " + r,
	}
}

// identifiers quotes names as SQL identifiers, comma-separated.
func identifiers(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = pgx.Identifier{n}.Sanitize()
	}
	return strings.Join(q, ", ")
}
