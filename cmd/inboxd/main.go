// Command inboxd turns at-least-once message delivery into exactly-once processing.
// Run "inboxd help" for its subcommands.
package main

import (
	"os"

	"github.com/inboxd/inboxd/cmd/inboxd/inboxdcli"
)

func main() {
	os.Exit(inboxdcli.Main())
}
