package cli

import (
	"context"
	"fmt"

	"github.com/inboxd/inboxd/internal/buildinfo"
)

func init() {
	commands["version"] = command{summary: "print inboxd's release, VCS revision and Go version", run: runVersion}
}

func runVersion(_ context.Context, e *env, args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: version takes no arguments", errUsage)
	}
	fmt.Fprintln(e.stdout, buildinfo.Read())
	return nil
}
