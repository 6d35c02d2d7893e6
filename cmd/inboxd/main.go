// Command inboxd turns at-least-once message delivery into exactly-once processing.
// Run "inboxd help" for its subcommands.
package main

import (
	"os"

	"github.com/inboxd/inboxd/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
