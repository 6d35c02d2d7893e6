package webhook

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// Watermark is a feed's latest resolved timestamp: every journal change committed at
// or before it has been delivered and its outcome recorded.
type Watermark struct {
	Sink      string
	Resolved  HLC
	UpdatedAt time.Time
}

// StoreWatermark records ts for sink unless a later one is already recorded, so that
// a late or replayed resolved message (several instances receive them) never moves
// the watermark backwards. The comparison casts the HLC text to DECIMAL, exact on
// both PostgreSQL and CockroachDB; ParseHLC guarantees the cast succeeds.
//
// A recorded watermark more than DefaultMaxResolvedAhead past now is replaced too: it
// can only have been forged (or stored before the handler ignored such values), and
// kept, it would freeze the watermark for good.
func StoreWatermark(ctx context.Context, db database.DB, sink string, ts HLC) error {
	_, err := db.Exec(ctx, `
		INSERT INTO feed_watermark (sink, resolved, resolved_at, updated_at)
		VALUES ($1, $2, $3, now())
		ON CONFLICT (sink) DO UPDATE
		SET resolved = excluded.resolved, resolved_at = excluded.resolved_at, updated_at = now()
		WHERE feed_watermark.resolved::DECIMAL < excluded.resolved::DECIMAL
		   OR feed_watermark.resolved_at > $4`,
		sink, ts.String(), ts.Time(), time.Now().Add(DefaultMaxResolvedAhead))
	if err != nil {
		return fmt.Errorf("storing watermark of sink %q: %w", sink, err)
	}
	return nil
}

// ReadWatermark returns the watermark of sink; found is false before the first
// resolved message.
func ReadWatermark(ctx context.Context, db database.DB, sink string) (w Watermark, found bool, err error) {
	var resolved string
	err = db.QueryRow(ctx, `SELECT sink, resolved, updated_at FROM feed_watermark WHERE sink = $1`, sink).
		Scan(&w.Sink, &resolved, &w.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Watermark{}, false, nil
	}
	if err != nil {
		return Watermark{}, false, fmt.Errorf("reading watermark of sink %q: %w", sink, err)
	}
	if w.Resolved, err = ParseHLC(resolved); err != nil {
		return Watermark{}, false, fmt.Errorf("reading watermark of sink %q: %w", sink, err)
	}
	return w, true, nil
}
