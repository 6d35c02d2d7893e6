package schema

// The lease lock's parts, for the tests of package schema_test (which may import
// testenv, which imports this package).
var (
	WithLease     = withLease
	LeaseTableSQL = leaseTableSQL
	TakeLeaseSQL  = takeLeaseSQL
)
