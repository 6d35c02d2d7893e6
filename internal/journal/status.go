package journal

import "slices"

// Status is a journal entry's status: the journal_state_status_valid CHECK constraint of
// migration 0026 (journal_status_valid of 0001 before it) lists the same five.
type Status string

const (
	StatusReceived  Status = "RECEIVED"  // journaled, not yet processed
	StatusProcessed Status = "PROCESSED" // the handler succeeded
	StatusFailed    Status = "FAILED"    // the handler failed; retried at next_attempt_at
	StatusDead      Status = "DEAD"      // the handler failed for the last time; parks its aggregate
	StatusRejected  Status = "REJECTED"  // a business rejection; never retried
)

// Statuses lists every journal status, in lifecycle order.
var Statuses = []Status{StatusReceived, StatusProcessed, StatusFailed, StatusDead, StatusRejected}

// RetryableStatuses are the statuses an operator retry applies to.
var RetryableStatuses = []Status{StatusFailed, StatusDead, StatusRejected}

// StatusText is statuses as plain strings: what pgx encodes as TEXT[] (it has no plan
// for a slice of a named string type when the parameter's type is not yet known), and
// what a message lists.
func StatusText(statuses []Status) []string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return out
}

// Valid reports whether s is a journal status.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// Pending reports whether an entry in s still waits for processing: RECEIVED or FAILED,
// the statuses of the pending index (journal_state_pending).
func (s Status) Pending() bool { return s == StatusReceived || s == StatusFailed }
