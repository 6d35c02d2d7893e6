// Package inboxdcli is the inboxd command line (serve, migrate, changefeed, …) for a
// one-file program that brings its own event handlers:
//
//	func main() {
//		inboxdcli.Register("order.placed", inboxd.HandlerFunc(placeOrder))
//		os.Exit(inboxdcli.Main())
//	}
//
// It is apart from package inboxd so that a program embedding inboxd.Client links no
// command line, benchmark, load generator or demo.
package inboxdcli

import (
	"os"
	"sync"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/cli"
	"github.com/inboxd/inboxd/internal/gctune"
)

// registered is what Register and RunOnDead said, in order, for "serve"'s Client.
var (
	mu         sync.Mutex
	registered []func(*inboxd.Client)
)

// Register adds (or replaces) the handler of an event type, with options such as
// inboxd.WithRetryPolicy. With -demo, "serve" adds the demo's "registration" handler
// unless one is registered for that type.
func Register(eventType string, h inboxd.Handler, opts ...inboxd.HandleOption) {
	mu.Lock()
	defer mu.Unlock()
	registered = append(registered, func(c *inboxd.Client) { c.Handle(eventType, h, opts...) })
}

// RunOnDead is inboxd.Client.RunOnDead for the command line's handlers.
func RunOnDead(eventType string) {
	mu.Lock()
	defer mu.Unlock()
	registered = append(registered, func(c *inboxd.Client) { c.RunOnDead(eventType) })
}

// Main runs the inboxd command line with os.Args and returns the exit code.
//
// It sets the process's garbage collector first (GOGC 400 and a soft memory limit of
// 512 MiB, or three quarters of the container's limit if lower), unless the
// environment's GOGC or GOMEMLIMIT says otherwise: see docs/configuration.md.
func Main() int {
	gctune.Apply(gctune.Decide(os.Getenv, os.ReadFile))
	return cli.Main(os.Args[1:], os.Stdout, os.Stderr, cli.Options{Handle: handle})
}

func handle(c *inboxd.Client) {
	mu.Lock()
	defer mu.Unlock()
	for _, r := range registered {
		r(c)
	}
}
