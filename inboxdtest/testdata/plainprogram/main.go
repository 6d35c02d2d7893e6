// A plain program (no testing.Init, no test binary) that publishes with the test kit,
// as a script seeding a local broker would: the kit must not need a test to run.
package main

import (
	"fmt"

	"github.com/inboxd/inboxd/inboxdtest"
)

func main() {
	t, done := inboxdtest.Standalone("plainprogram")
	defer done()
	q := inboxdtest.Queue(t)
	id := inboxdtest.Publish(t, q, []byte(`{"id":"plain-1","type":"order-placed"}`), nil)
	fmt.Println(id)
}
