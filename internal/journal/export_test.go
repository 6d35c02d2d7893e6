package journal

// The claim's statements, for the EXPLAIN tests.
var (
	PickDueSQL        = pickDueSQL
	PickAggregatesSQL = pickAggregatesSQL
	LockHeadsSQL      = lockHeadsSQL
)

// CRDBRowEstimateSQL is CockroachDB's estimate of the journal's rows (stats.go).
var CRDBRowEstimateSQL = crdbRowEstimateSQL

// SeedSQL is seedSQL, for the external tests.
var SeedSQL = seedSQL

// seedSQL writes journal entries straight into the database, each with its state row,
// for tests: sel is a SELECT whose columns are named, among them id, payload,
// event_type and aggregate_id, and the journal columns in entry and the state columns
// in state (journal_state's defaults fill the rest: RECEIVED, attempts 0, now()). Its
// rows are inserted in the order sel returns them, so that a sequence_no left to its
// default follows it.
func seedSQL(entry, state []string, sel string) string {
	cols := append([]string{"id", "payload", "event_type", "aggregate_id"}, entry...)
	list := func(prefix string, cs []string) string {
		out := ""
		for i, c := range cs {
			if i > 0 {
				out += ", "
			}
			out += prefix + c
		}
		return out
	}
	stateCols, stateVals := "id, aggregate_id, sequence_no", "n.id, n.aggregate_id, n.sequence_no"
	if len(state) > 0 {
		stateCols += ", " + list("", state)
		stateVals += ", " + list("src.", state)
	}
	return `WITH src AS (` + sel + `),
	n AS (INSERT INTO journal (` + list("", cols) + `) SELECT ` + list("", cols) + ` FROM src
	      RETURNING id, aggregate_id, sequence_no)
	INSERT INTO journal_state (` + stateCols + `) SELECT ` + stateVals + ` FROM n JOIN src ON src.id = n.id`
}
