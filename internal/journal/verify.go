package journal

import (
	"context"
	"fmt"

	"github.com/inboxd/inboxd/internal/database"
)

// IDsByTag counts the journal rows of each id that came from one destination (tag);
// a count above 1 would be a broken primary key.
func IDsByTag(ctx context.Context, db database.DB, tag string) (map[string]int, error) {
	return countIDs(ctx, db, `SELECT id::TEXT FROM journal WHERE tag = $1`, tag)
}

// QuarantineIDsByDestination counts the quarantine rows of each id from one destination.
func QuarantineIDsByDestination(ctx context.Context, db database.DB, destination string) (map[string]int, error) {
	return countIDs(ctx, db, `SELECT id::TEXT FROM quarantine WHERE destination = $1`, destination)
}

func countIDs(ctx context.Context, db database.DB, sql, arg string) (map[string]int, error) {
	rows, err := db.Query(ctx, sql, arg)
	if err != nil {
		return nil, fmt.Errorf("reading ids: %w", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("reading ids: %w", err)
		}
		out[id]++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading ids: %w", err)
	}
	return out, nil
}
