package inboxd_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestPoolWarningSaysHowToFix: a pool smaller than Config.MinPoolSize is warned about
// at Run, and the warning names the two settings that fix it.
func TestPoolWarningSaysHowToFix(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	pool := db.OpenPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	var logs bytes.Buffer
	c, err := inboxd.New(pool, inboxd.Config{StompAddr: "127.0.0.1:1", Destinations: []string{"/queue/pool-warning"},
		DisableHTTP: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run warns first, then stops at the first thing that waits
	_ = c.Run(ctx)
	for _, want := range []string{"smaller than inboxd needs", "Config.MinPoolSize()", "MaxConns"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the pool warning lacks %q:\n%s", want, logs.String())
		}
	}
}
