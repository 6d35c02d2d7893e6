package inboxdcli_test

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/cmd/inboxd/inboxdcli"
)

// A one-file program: its handler, and the whole inboxd command line around it.
func Example() {
	inboxdcli.Register("order.placed", inboxd.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev inboxd.Event) error {
		_, err := tx.Exec(ctx, `INSERT INTO orders (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`, ev.ID)
		return err
	}))
	// In a real program: os.Exit(inboxdcli.Main())
}
