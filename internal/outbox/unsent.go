package outbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/inboxd/inboxd/internal/database"
)

// sqlUnsent lists unsent rows in emit order (seq, then id within a statement's block),
// for the test kit (inboxdtest) to show what a handler emitted.
const sqlUnsent = `SELECT id::TEXT, destination, headers, body, attempts, created_at, sent_at, last_error
	FROM outbox WHERE sent_at IS NULL ORDER BY seq, id LIMIT $1`

// Unsent returns up to limit unsent rows, in emit order.
func Unsent(ctx context.Context, db database.DB, limit int) ([]Row, error) {
	rows, err := db.Query(ctx, sqlUnsent, limit)
	if err != nil {
		return nil, fmt.Errorf("listing unsent outbox rows: %w", err)
	}
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var hj []byte
		if err := rows.Scan(&r.ID, &r.Destination, &hj, &r.Body, &r.Attempts, &r.CreatedAt, &r.SentAt, &r.LastError); err != nil {
			return nil, fmt.Errorf("reading an unsent outbox row: %w", err)
		}
		if err := json.Unmarshal(hj, &r.Headers); err != nil {
			return nil, fmt.Errorf("decoding outbox row %s headers: %w", r.ID, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing unsent outbox rows: %w", err)
	}
	return out, nil
}
