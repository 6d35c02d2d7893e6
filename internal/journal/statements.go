package journal

import (
	"encoding/json"
	"time"
)

// Statement is one SQL statement inboxd sends, by name, for the test that checks every
// statement with CockroachDB's own parser and type checker (internal/sqlcheck).
type Statement struct {
	Name string
	SQL  string
}

// BuiltStatements returns the statements this package assembles at run time (filters,
// keyset pages, bulk requeues), built for representative inputs: every criterion alone,
// all of them at once, both directions, with and without a cursor. Constant statements
// are found in the source by the test itself.
func BuiltStatements() []Statement {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	seq := int64(42)
	filters := map[string]Filter{
		"none":     {},
		"type":     {EventType: "registration"},
		"statuses": {Statuses: []Status{StatusDead, StatusFailed}},
		"contains": {Contains: json.RawMessage(`{"jurisdiction":"mga"}`)},
		"since":    {Since: at},
		"until":    {Until: at},
		"all": {EventType: "registration", Statuses: []Status{StatusProcessed}, Contains: json.RawMessage(`{"a":1}`),
			Since: at, Until: at.Add(time.Hour)},
	}
	var out []Statement
	add := func(name, sql string) { out = append(out, Statement{Name: name, SQL: sql}) }
	for _, name := range []string{"none", "type", "statuses", "contains", "since", "until", "all"} {
		f := filters[name]
		for _, p := range []Page{{Limit: 50}, {Limit: 50, Desc: true, After: &seq}, {Limit: 1, After: &seq}} {
			sql, _ := listSQL(f, p)
			add("List/"+name, sql)
		}
		for _, m := range []RequeueMode{Retry, Replay} {
			g, ok := m.restrict(f)
			if !ok {
				continue
			}
			for _, sc := range []requeueScope{{status: StatusDead}, {eventType: "registration"}} {
				sql, _ := countMatchingSQL(g, sc)
				add("CountMatching/"+name, sql)
				sql, _ = requeueSQL(g, m, sc, 0, 1000)
				add("Requeue/"+m.String()+"/"+name, sql)
				sql, _ = sc.upperSQL()
				add("Requeue/upper", sql)
			}
		}
	}
	for _, reason := range []string{"", "not_json"} {
		for _, p := range []QuarantinePage{{Limit: 50}, {Limit: 50, Desc: true, After: &QuarantineKey{ReceivedAt: at, ID: "6f1c9c1e-0000-4000-8000-000000000001"}}} {
			sql, _ := listQuarantineSQL(reason, p)
			add("ListQuarantine/"+reason, sql)
		}
	}
	add("ClaimDue", claimDueSQL)
	add("ClaimHeads/skip", lockHeadsSQL(true))
	add("ClaimHeads/wait", lockHeadsSQL(false))
	// lockOpening: a claim's lock, then the handlers' savepoint (process.handlerSavepoint).
	add("LockOpening/batch", lockBatchSQL)
	add("LockOpening/skip", lockHeadsSQL(true))
	add("LockOpening/wait", lockHeadsSQL(false))
	add("LockOpening/savepoint", "SAVEPOINT inboxd_handler")
	return out
}
