package cli

import (
	"context"

	"github.com/inboxd/inboxd/internal/bench"
)

func init() {
	commands["bench"] = command{
		summary: "benchmark: broker limit vs naive inbox vs inboxd ingest vs end to end, ratios from one run (-quick: < 60 s)",
		run: func(ctx context.Context, e *env, args []string) error {
			return bench.Main(ctx, args, e.stdout, e.stderr)
		},
	}
	// The child process of one benchmark row; "inboxd bench" starts it.
	commands["bench-row"] = command{
		hidden: true,
		run: func(ctx context.Context, e *env, args []string) error {
			return bench.RowMain(ctx, args, e.stdout, e.stderr)
		},
	}
}
