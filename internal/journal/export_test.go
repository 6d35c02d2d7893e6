package journal

// The claim's statements, for the EXPLAIN tests.
var (
	PickDueSQL        = pickDueSQL
	PickAggregatesSQL = pickAggregatesSQL
	LockHeadsSQL      = lockHeadsSQL
)

// CRDBRowEstimateSQL is CockroachDB's estimate of the journal's rows (stats.go).
var CRDBRowEstimateSQL = crdbRowEstimateSQL
