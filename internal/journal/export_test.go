package journal

// The claim's statements, for the EXPLAIN tests.
var (
	PickDueSQL        = pickDueSQL
	PickAggregatesSQL = pickAggregatesSQL
	LockHeadsSQL      = lockHeadsSQL
)
