package testenv

import (
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// leakIgnores are the goroutines Main does not count as leaks: third-party background
// workers that no API of theirs stops. Each says why; a goroutine of inboxd's own is
// never listed here, but stopped.
var leakIgnores = []goleak.Option{
	// go-stomp's in-memory test server (stompx's reconnect test): Serve's request loop
	// reads its channel forever, and closing the listener ends only its accept loop.
	goleak.IgnoreTopFunction("github.com/go-stomp/stomp/v3/server.(*requestProcessor).Serve"),
	// go-stomp's Subscription.Unsubscribe waits for its receipt in a goroutine; when the
	// receipt times out (a loaded broker), or its broadcast came before that goroutine
	// began to wait (a missed wakeup: see ingest's session.unsubscribe), that goroutine
	// waits on the subscription's condition forever (waitWithTimeout, subscription.go).
	goleak.IgnoreAnyFunction("github.com/go-stomp/stomp/v3.waitWithTimeout.func1"),
	// go-stomp's readLoop hands each frame to the connection's processing loop through a
	// buffered channel and never stops sending: once a connection is disconnected with
	// the broker still pushing a prefetch of messages, the buffer fills and readLoop
	// blocks on the send forever (conn.go, readLoop). Only that state has readLoop on top
	// of the stack; a connection still open waits in the socket read below it.
	goleak.IgnoreTopFunction("github.com/go-stomp/stomp/v3.readLoop"),
}

// Main runs a package's tests (the body of its TestMain, after any work of its own) and
// then fails the test binary when a goroutine is still running: inboxd is made of
// long-running goroutines, and one that a component forgets to stop on shutdown, or a
// pool or server a test forgets to close, would otherwise pass unnoticed. It checks
// only after a successful run, as goleak.VerifyTestMain does (a failed test may leave
// goroutines behind on purpose, and its failure is the report).
func Main(m *testing.M) {
	skipExamplesWithoutServices()
	code := m.Run()
	if code == 0 {
		// Keep-alive connections the tests' default HTTP client left idle are a pool of the
		// test's, not a leak of the code under test.
		http.DefaultClient.CloseIdleConnections()
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left running after the tests passed: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakGrace is how long a goroutine may take to return after the tests: under -race on
// a loaded CI machine, one told to stop can outlast goleak's own retries (about 0.4 s),
// while a leaked one is still there for good. The longest bounded wait is a send whose
// connection was dropped before go-stomp took its frame: it returns 12 s after it began
// (stompx.DefaultReceiptTimeout and its slack), and go-stomp's I/O loop ends behind it.
const leakGrace = 15 * time.Second

// findLeaks polls goleak.Find until no unexpected goroutine is left or leakGrace passes.
func findLeaks() error {
	deadline := time.Now().Add(leakGrace)
	for {
		err := goleak.Find(leakIgnores...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
	}
}
