// Package sqlbound keeps every statement inboxd sends under the database's limit on one
// client message. CockroachDB refuses any client (frontend) message larger than
// sql.conn.max_read_buffer_message_size, 16 MiB by default, with SQLSTATE 08P01 "message
// size … bigger than maximum allowed message size …"
// (cockroach pkg/sql/pgwire/pgwirebase/encoding.go: defaultMaxReadBufferMessageSize = 1 << 24
// and ReadBuffer.ReadUntypedMsg; pkg/sql/pgwire/conn.go sends it as an error). In the
// extended protocol pgx sends every parameter of a statement in one Bind message, so a
// statement that carries user bytes (bodies, payloads, headers) as parameters must be
// split by bytes, not only by rows, and a single value must be bounded.
//
// The rule for every such statement: estimate it with Size/Value (the SQL text plus each
// value and its per-value framing), keep it at most the configured MaxStatementBytes
// (DefaultMaxStatementBytes, half the server's default limit, leaving room for encoding
// overhead the estimate does not model), group rows with Split, and treat
// IsMessageTooLarge as deterministic: split or isolate, never retry as an outage.
package sqlbound

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/defaults"
)

// ServerLimit is CockroachDB's default sql.conn.max_read_buffer_message_size: the most
// bytes one client message may hold (cockroach pkg/sql/pgwire/pgwirebase/encoding.go,
// defaultMaxReadBufferMessageSize = 1 << 24).
const ServerLimit = 16 << 20

// DefaultMaxStatementBytes is the default bound on one statement's estimated size: SQL
// text plus parameters, well under ServerLimit.
const DefaultMaxStatementBytes = defaults.MaxStatementBytes

// MinMaxStatementBytes is the smallest MaxStatementBytes accepted: below it, the fixed
// parts of a quarantine row (capped headers, detail, ids) would not fit.
const MinMaxStatementBytes = 1 << 20

// PerValue is what one parameter or array element costs on the wire beyond its own
// bytes: a 4-byte length in the Bind message or the array encoding, rounded up.
const PerValue = 8

// StatementOverhead is counted once per statement besides its SQL text: the Bind
// message's framing, format codes and the array headers of its parameters.
const StatementOverhead = 4 << 10

// Size is the estimated size of a statement whose SQL text is sql, before its rows.
func Size(sql string) int { return len(sql) + StatementOverhead }

// Value is the estimated cost of one parameter value (or array element) of n bytes.
func Value(n int) int { return n + PerValue }

// Split groups items, in order, into consecutive runs whose sizes (size(item), plus
// base once per run) add up to at most max. An item too large for a run of its own is
// put alone in its run; the caller must shrink it (see the quarantine body cap) or
// expect IsMessageTooLarge. It never returns an empty run.
func Split[T any](items []T, base, max int, size func(T) int) [][]T {
	if len(items) == 0 {
		return nil
	}
	var runs [][]T
	start, total := 0, base
	for i, it := range items {
		n := size(it)
		if i > start && total+n > max {
			runs = append(runs, items[start:i])
			start, total = i, base
		}
		total += n
	}
	return append(runs, items[start:])
}

// IsMessageTooLarge reports whether err is the database refusing a client message for
// its size: SQLSTATE 08P01 (protocol_violation) with CockroachDB's "bigger than maximum
// allowed message size". It is deterministic, unlike the rest of class 08: sending the
// same statement again is refused again, so the statement must be split, not retried.
func IsMessageTooLarge(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "08P01" &&
		strings.Contains(pgErr.Message, "bigger than maximum allowed message size")
}
