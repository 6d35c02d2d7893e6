package testenv

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Start runs run in a goroutine until stop, or the end of the test, cancels its context.
// stop waits for run to return (at most within) and returns its error; the cleanup
// that stops a run the test left running fails the test on a non-nil error, since every
// Run of inboxd returns nil once its context is cancelled.
func Start(t testing.TB, within time.Duration, run func(ctx context.Context) error) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(within):
				err = fmt.Errorf("still running %s after its context was cancelled", within)
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	})
	return stop
}
