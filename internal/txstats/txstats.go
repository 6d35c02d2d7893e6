// Package txstats counts the statements and round trips of processing transactions,
// inboxd's own apart from its handlers', with a pgx tracer: on CockroachDB each
// statement is at least one round trip to the gateway, and a batch holds its locks for
// as long as its round trips take, so the count is processing's cost that does not
// drift with the machine's speed.
//
// The engine marks the context of each processing transaction (Start) and of each
// handler call in it (Handler); a Tracer installed on the pool counts what is sent under
// those contexts and adds a transaction's counts to its totals when it commits. BEGIN
// and COMMIT are not counted, nor what BEGIN's own query carries (the transaction's
// settings), nor the round trips pgx spends preparing a statement the first time a
// connection sends it, nor pgxpool's ping of a connection idle for a second before it
// hands it out.
package txstats

import (
	"context"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Counts are the statements and round trips of processing transactions.
type Counts struct {
	Transactions      int64 // committed processing transactions
	Statements        int64 // inboxd's own
	RoundTrips        int64 // inboxd's own
	HandlerStatements int64
	HandlerRoundTrips int64
	// MaxStatements and MaxRoundTrips are the most of inboxd's own in one transaction.
	MaxStatements int64
	MaxRoundTrips int64
}

// PerTransaction returns inboxd's statements, its round trips, the handlers' statements
// and round trips, each per committed transaction.
func (c Counts) PerTransaction() (stmts, rts, handlerStmts, handlerRTs float64) {
	n := float64(max(c.Transactions, 1))
	return float64(c.Statements) / n, float64(c.RoundTrips) / n, float64(c.HandlerStatements) / n, float64(c.HandlerRoundTrips) / n
}

type counter struct {
	mu                       sync.Mutex
	stmts, rts, hStmts, hRTs int64
}

func (c *counter) add(handler bool, stmts int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if handler {
		c.hStmts += stmts
		c.hRTs++
		return
	}
	c.stmts += stmts
	c.rts++
}

type (
	txKey      struct{}
	handlerKey struct{}
)

// Start marks ctx as a processing transaction's: what is sent under it, up to its
// COMMIT, is counted as one transaction by a Tracer.
func Start(ctx context.Context) context.Context {
	return context.WithValue(ctx, txKey{}, &counter{})
}

// Handler marks ctx as a handler's: what is sent under it is the handler's.
func Handler(ctx context.Context) context.Context {
	if ctx.Value(txKey{}) == nil {
		return ctx
	}
	return context.WithValue(ctx, handlerKey{}, true)
}

func of(ctx context.Context) (*counter, bool) {
	c, _ := ctx.Value(txKey{}).(*counter)
	h, _ := ctx.Value(handlerKey{}).(bool)
	return c, h
}

// Sent counts stmts statements sent in one round trip under ctx past pgx's tracers
// (straight on the connection, pgconn's pipeline).
func Sent(ctx context.Context, stmts int) {
	if c, handler := of(ctx); c != nil {
		c.add(handler, int64(stmts))
	}
}

// Tracer counts processing transactions (pgx.QueryTracer, pgx.BatchTracer). Install it
// as a pool's ConnConfig.Tracer. The zero value is ready.
type Tracer struct {
	mu  sync.Mutex
	sum Counts
}

// Counts returns the totals so far.
func (t *Tracer) Counts() Counts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sum
}

// TraceQueryStart counts a query or Exec: one statement, one round trip.
func (t *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c, handler := of(ctx)
	if c == nil {
		return ctx
	}
	sql := strings.TrimSpace(data.SQL)
	switch {
	case !handler && hasPrefixFold(sql, "begin"), sql == "-- ping":
	case !handler && strings.EqualFold(sql, "commit"):
		t.commit(c)
	default:
		c.add(handler, 1)
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *Tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart counts a batch: its statements, one round trip.
func (t *Tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if c, handler := of(ctx); c != nil && data.Batch != nil {
		c.add(handler, int64(data.Batch.Len()))
	}
	return ctx
}

// TraceBatchQuery implements pgx.BatchTracer.
func (t *Tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (t *Tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t *Tracer) commit(c *counter) {
	c.mu.Lock()
	stmts, rts, hStmts, hRTs := c.stmts, c.rts, c.hStmts, c.hRTs
	c.stmts, c.rts, c.hStmts, c.hRTs = 0, 0, 0, 0
	c.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sum.Transactions++
	t.sum.Statements += stmts
	t.sum.RoundTrips += rts
	t.sum.HandlerStatements += hStmts
	t.sum.HandlerRoundTrips += hRTs
	t.sum.MaxStatements = max(t.sum.MaxStatements, stmts)
	t.sum.MaxRoundTrips = max(t.sum.MaxRoundTrips, rts)
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
