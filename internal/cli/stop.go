package cli

import (
	"log/slog"
	"time"
)

// exitBudget is what serve spends after inboxd's own shutdown (INBOXD_SHUTDOWN_TIMEOUT)
// on closing the pool and flushing spans: the whole stop ends within the shutdown
// timeout plus this, whatever a dependency does.
const exitBudget = 1500 * time.Millisecond

// closeWithin runs close and waits for it at most d. pgxpool's Close waits for every
// connection to be released and closed, and pgx closes a connection interrupted in a
// query by sending the server a cancel request that it waits for up to 15 s: on a
// database that does not answer (a blackholed path, a paused VM) the pool is abandoned
// to the process's exit instead, and the server ends those sessions itself.
func closeWithin(what string, d time.Duration, log *slog.Logger, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		log.Warn("abandoned at exit: it did not close in time", "what", what, "waited", d)
	}
}
