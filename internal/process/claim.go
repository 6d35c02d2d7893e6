package process

import (
	"context"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
)

// split divides the ids of items, without duplicates, into parts by aggregate (an item
// without one is its own), keeping their order: each part is claimed and run by one
// worker, so that an aggregate's events run in sequence.
func split(items []Item, parts int) [][]string {
	byPart := make([][]string, parts)
	seen := map[string]bool{}
	for _, it := range items {
		if seen[it.ID] {
			continue
		}
		seen[it.ID] = true
		key := it.AggregateID
		if key == "" {
			key = it.ID
		}
		h := fnv.New32a()
		_, _ = h.Write([]byte(key))
		p := int(h.Sum32() % uint32(parts))
		byPart[p] = append(byPart[p], it.ID)
	}
	return byPart
}

// claimFunc locks the entries of one batch inside its transaction, then opens the
// savepoint of the batch's first handler call (handlerSavepoint) in the same round
// trip.
type claimFunc func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error)

// claimDelivered claims delivered entries by id (journal.LockBatch).
func claimDelivered(ids []string) claimFunc {
	return func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error) {
		return journal.LockBatchOpening(ctx, tx, ids, handlerSavepoint)
	}
}

// claimDue claims up to limit due aggregate heads, of the first limit of aggregates
// when it is not nil. A sweep (aggregates nil) on PostgreSQL under READ COMMITTED picks
// and locks in one statement, in the transaction (journal.ClaimDue). Otherwise the heads
// are picked here, on the pool, before the batch's transaction begins (see
// journal.PickHeads), and locked in it; batch calls this again before every try.
func (e *Engine) claimDue(ctx context.Context, grace time.Duration, limit int, aggregates []string) claimFunc {
	if aggregates == nil && e.readCommitted(ctx) {
		return func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error) {
			return journal.ClaimDue(ctx, tx, grace, limit, handlerSavepoint)
		}
	}
	aggs := aggregates
	if aggs != nil {
		aggs = aggs[:min(limit, len(aggs))]
	}
	picked, err := journal.PickHeads(ctx, e.db, grace, limit, aggs)
	return func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error) {
		if err != nil {
			return nil, err
		}
		return journal.LockPickedOpening(ctx, tx, picked, grace, limit, aggregates == nil, handlerSavepoint)
	}
}

// readCommitted tells whether processing transactions run under READ COMMITTED on
// PostgreSQL, the session's default there (txOptions): then a sweep's claim picks and
// locks in one statement (journal.ClaimDue), and BEGIN needs no guard for SERIALIZABLE
// (beginBatchSQL). It asks the database once; until an answer comes, it says no.
func (e *Engine) readCommitted(ctx context.Context) bool {
	if e.cfg.Dialect == database.CockroachDB {
		return false
	}
	switch e.isolation.Load() {
	case isoReadCommitted:
		return true
	case isoOther:
		return false
	}
	// Not under ctx: a one-off question, not a statement of the batch (txstats).
	qctx, cancel := context.WithTimeout(context.Background(), defaults.MinStatementTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	var iso string
	if err := e.db.QueryRow(qctx, `SELECT current_setting('default_transaction_isolation')`).Scan(&iso); err != nil {
		return false
	}
	if iso == "read committed" {
		e.isolation.Store(isoReadCommitted)
		return true
	}
	e.isolation.Store(isoOther)
	return false
}

// The answers Engine.isolation caches; zero is none yet.
const (
	isoReadCommitted int32 = iota + 1
	isoOther
)
