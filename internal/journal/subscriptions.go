package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// Subscription is a durable topic subscription inboxd created on the broker.
type Subscription struct {
	ClientID         string     `db:"client_id"`
	Name             string     `db:"subscription_name"`
	Destination      string     `db:"destination"`
	CreatedAt        time.Time  `db:"created_at"`
	LastSubscribedAt time.Time  `db:"last_subscribed_at"`
	RemovedAt        *time.Time `db:"removed_at"`
}

// RecordSubscription notes that a durable subscription is about to be (re)created or
// resumed. Ingest calls it before every durable SUBSCRIBE, so the table knows every
// subscription the broker may hold for inboxd.
func RecordSubscription(ctx context.Context, db database.DB, clientID, name, destination string) error {
	_, err := db.Exec(ctx, `INSERT INTO durable_subscription (client_id, subscription_name, destination)
		VALUES ($1, $2, $3)
		ON CONFLICT (client_id, subscription_name) DO UPDATE
		SET destination = excluded.destination, last_subscribed_at = now(), removed_at = NULL`,
		clientID, name, destination)
	if err != nil {
		return fmt.Errorf("recording durable subscription %q of client id %q: %w", name, clientID, err)
	}
	return nil
}

// Subscriptions lists the recorded durable subscriptions, removed ones included, by
// client id and name.
func Subscriptions(ctx context.Context, db database.DB) ([]Subscription, error) {
	rows, err := db.Query(ctx, `SELECT client_id, subscription_name, destination, created_at, last_subscribed_at, removed_at
		FROM durable_subscription ORDER BY client_id, subscription_name`)
	if err != nil {
		return nil, fmt.Errorf("listing durable subscriptions: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[Subscription])
	if err != nil {
		return nil, fmt.Errorf("listing durable subscriptions: %w", err)
	}
	return out, nil
}

// MarkSubscriptionRemoved records that the broker no longer has the subscription. It
// reports whether the table knew it.
func MarkSubscriptionRemoved(ctx context.Context, db database.DB, clientID, name string) (bool, error) {
	tag, err := db.Exec(ctx, `UPDATE durable_subscription SET removed_at = now()
		WHERE client_id = $1 AND subscription_name = $2`, clientID, name)
	if err != nil {
		return false, fmt.Errorf("marking durable subscription %q of client id %q removed: %w", name, clientID, err)
	}
	return tag.RowsAffected() > 0, nil
}
