// Package lifecycle starts and stops inboxd's long-running parts one way: each part is a
// Run(ctx) that returns once ctx is cancelled and its work under way is finished; parts
// are grouped in stages that stop in order (intake before the work it feeds, the work
// before what observes it), all within one shutdown budget.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Part is one long-running part. Run returns nil (or context.Canceled) when its context
// is cancelled and it has stopped; any other error stops the whole group.
type Part struct {
	Name string
	Run  func(ctx context.Context) error
}

// Stage is parts that start together and stop together.
type Stage struct {
	Name  string
	Parts []Part
}

// ErrShutdownTimeout is returned by Run when the stages did not stop within the budget.
// What was unfinished is left to redelivery and to the database, never half-recorded:
// every step of inboxd is a transaction.
var ErrShutdownTimeout = errors.New("shutdown did not finish within the shutdown timeout")

// Run starts every part of every stage and waits until ctx is cancelled or a part
// fails. It then stops the stages in order, each cancelled and waited for before the
// next, within budget overall, and returns the parts' errors (nil after a clean
// stop). Past the budget it returns ErrShutdownTimeout and leaves the parts still
// running to end with the process.
func Run(ctx context.Context, log *slog.Logger, budget time.Duration, stages ...Stage) error {
	type running struct {
		name   string
		cancel context.CancelFunc
		wg     sync.WaitGroup
	}
	failed := make(chan error, 1)
	// Cancelled when the budget runs out: the work detached from its stage's
	// stop (Detach) ends then, so that nothing holds a connection past the stop.
	hard, expire := context.WithCancel(context.WithoutCancel(ctx))
	defer expire()
	var errsMu sync.Mutex
	var errs []error
	// The parts not yet returned, so that a shutdown past its budget says which
	// dependency hung rather than only that one did.
	var busyMu sync.Mutex
	busy := map[string]int{}
	all := make([]*running, len(stages))
	for i, st := range stages {
		// Detached from ctx: a stage is stopped by its turn in the order, not by ctx.
		sctx, cancel := context.WithCancel(context.WithValue(context.WithoutCancel(ctx), hardKey{}, hard))
		r := &running{name: st.Name, cancel: cancel}
		all[i] = r
		for _, p := range st.Parts {
			r.wg.Add(1)
			busyMu.Lock()
			busy[p.Name]++
			busyMu.Unlock()
			go func() {
				defer r.wg.Done()
				defer func() {
					busyMu.Lock()
					if busy[p.Name]--; busy[p.Name] == 0 {
						delete(busy, p.Name)
					}
					busyMu.Unlock()
				}()
				err := p.Run(sctx)
				if err == nil || errors.Is(err, context.Canceled) && sctx.Err() != nil {
					return
				}
				err = fmt.Errorf("%s: %w", p.Name, err)
				errsMu.Lock()
				errs = append(errs, err)
				errsMu.Unlock()
				select {
				case failed <- err:
				default:
				}
			}()
		}
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down", "stages", len(stages))
	case err := <-failed:
		log.Error("shutting down after a failure", "err", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, r := range all {
			began := time.Now()
			r.cancel()
			r.wg.Wait()
			log.Info("stopped", "stage", r.name, "took", time.Since(began).Round(time.Millisecond))
		}
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		for _, r := range all {
			r.cancel()
		}
		expire()
		busyMu.Lock()
		names := slices.Sorted(maps.Keys(busy))
		busyMu.Unlock()
		errsMu.Lock()
		defer errsMu.Unlock()
		return errors.Join(errors.Join(errs...), fmt.Errorf("%w (still running: %s)", ErrShutdownTimeout, strings.Join(names, ", ")))
	}
	errsMu.Lock()
	defer errsMu.Unlock()
	return errors.Join(errs...)
}

type hardKey struct{}

// Detach returns a context that a stage's stop does not cancel, for the work a part
// finishes after it was told to stop (ingest's last commit, a webhook batch), but that
// the end of the shutdown budget does: past it, Run has returned and that work is
// abandoned, its transaction rolled back when its connection is dropped. Outside Run
// it is only detached from ctx. Call cancel when the work is done.
func Detach(ctx context.Context) (context.Context, context.CancelFunc) {
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	hard, ok := ctx.Value(hardKey{}).(context.Context)
	if !ok {
		return dctx, cancel
	}
	stop := context.AfterFunc(hard, cancel)
	return dctx, func() {
		stop()
		cancel()
	}
}

// Split divides the shutdown budget between stages by weight, so that each part that
// needs a bound of its own for finishing its work (the sweeper's transactions, the
// webhook's batches, the API's requests) gets its explicit share.
func Split(budget time.Duration, weights ...int) []time.Duration {
	total := 0
	for _, w := range weights {
		total += w
	}
	out := make([]time.Duration, len(weights))
	for i, w := range weights {
		out[i] = budget * time.Duration(w) / time.Duration(max(total, 1))
	}
	return out
}
