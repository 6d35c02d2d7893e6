package process

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
)

// claimFunc locks the entries of one batch inside its transaction.
type claimFunc func(ctx context.Context, tx pgx.Tx) ([]journal.Head, error)
