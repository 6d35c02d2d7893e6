package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inboxd/inboxd/internal/process"
)

// ErrShuttingDown answers the posts that arrive after Shutdown began: the sink retries
// them, against this instance once it is back or another one.
var ErrShuttingDown = errors.New("webhook shutting down")

// errTooManyBatches answers a post that would start one batch more than
// Config.MaxBatchesInFlight.
var errTooManyBatches = errors.New("too many batches in flight")

// job is the processing of the pending items of one post. It runs under the handler's
// own deadline, not the request's, and outlives the request: the sink's client gives up
// after webhook_client_timeout and posts the same batch again, and that retry joins the
// job instead of running the handlers a second time.
type job struct {
	done chan struct{}
	// Set before done is closed.
	outs map[string]process.Outcome
	err  error
}

// inflight is the per-process registry of jobs by event id. Across processes, a second
// instance that receives the retry runs its own job, whose journal.LockBatch (FOR UPDATE,
// not SKIP LOCKED) waits for the first job's row locks and then finds the rows no longer
// pending: a no-op, handlers not run again (TestSlowBatchOutlivesClientTimeout, two
// instances).
type inflight struct {
	life   context.Context // cancelled by Shutdown once its grace is over
	cancel context.CancelFunc

	waiters atomic.Int64 // posts waiting for a batch, for tests

	mu     sync.Mutex
	byID   map[string]*job
	jobs   int
	closed bool
	wg     sync.WaitGroup
}

func newInflight() *inflight {
	life, cancel := context.WithCancel(context.Background())
	return &inflight{life: life, cancel: cancel, byID: map[string]*job{}}
}

// start registers a job for the items no job is processing yet, and returns it (nil
// when every item is already in flight) and the jobs of the others, by item id.
func (h *Handler) start(reqCtx context.Context, items []process.Item) (*job, map[string]*job, error) {
	f := h.inflight
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, nil, ErrShuttingDown
	}
	joined := map[string]*job{}
	// Usually no item is in flight yet: sized for all of them, fresh grows no copies.
	fresh := make([]process.Item, 0, len(items))
	for _, it := range items {
		if j := f.byID[it.ID]; j != nil {
			joined[it.ID] = j
		} else {
			fresh = append(fresh, it)
		}
	}
	if len(fresh) == 0 {
		return nil, joined, nil
	}
	if f.jobs >= h.cfg.MaxBatchesInFlight {
		return nil, nil, errTooManyBatches
	}
	j := &job{done: make(chan struct{})}
	for _, it := range fresh {
		f.byID[it.ID] = j
	}
	f.jobs++
	f.wg.Add(1)
	// The request's values (not its cancellation), under the handler's deadline; ended
	// early only by Shutdown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(reqCtx), h.cfg.ProcessTimeout)
	stop := context.AfterFunc(f.life, cancel)
	go func() {
		defer f.wg.Done()
		defer cancel()
		defer stop()
		h.run(ctx, j, fresh)
	}()
	return j, joined, nil
}

// run processes the items, records the outcomes in j and the metrics, and takes the
// job out of the registry.
func (h *Handler) run(ctx context.Context, j *job, items []process.Item) {
	start := time.Now()
	outs, err := h.proc.ProcessBatch(ctx, items)
	byID := make(map[string]process.Outcome, len(items))
	for i, it := range items {
		if i < len(outs) && outs[i] != "" {
			byID[it.ID] = outs[i]
			h.m.WebhookRows.WithLabelValues(string(outs[i])).Inc()
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil && h.inflight.life.Err() == nil:
		err = fmt.Errorf("%w: processing a batch of %d events took longer than %s: %w",
			errProcessTimeout, len(items), h.cfg.ProcessTimeout, err)
		h.log.Error("webhook batch not finished in time; what it committed stays, the sink's retry processes the rest",
			"events", len(items), "process_timeout", h.cfg.ProcessTimeout, "took", time.Since(start).Round(time.Millisecond))
	case h.inflight.life.Err() != nil:
		h.log.Info("webhook batch cancelled by shutdown; the sink will redeliver", "events", len(items))
	}
	f := h.inflight
	f.mu.Lock()
	for _, it := range items {
		if f.byID[it.ID] == j {
			delete(f.byID, it.ID)
		}
	}
	f.jobs--
	j.outs, j.err = byID, err
	f.mu.Unlock()
	close(j.done)
}

// wait waits for the jobs, at most as long as the request lasts.
func (f *inflight) wait(ctx context.Context, jobs ...*job) error {
	f.waiters.Add(1)
	defer f.waiters.Add(-1)
	for _, j := range jobs {
		if j == nil {
			continue
		}
		select {
		case <-j.done:
			if j.err != nil {
				return j.err
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for the batch in flight: %w", context.Cause(ctx))
		}
	}
	return nil
}

// cancelWait bounds how long Shutdown waits for cancelled batches to return: their
// transactions roll back on cancellation, and the engine abandons a handler that
// ignores its context after a short grace.
const cancelWait = 10 * time.Second

// Shutdown stops starting batches (new posts are answered 503, and the sink retries
// them) and waits for the batches in flight until ctx ends; then it cancels them,
// rolling back what they had not committed, and waits for them to return, at most
// cancelWait more. A request waiting for a batch is answered once it ends, 2xx if its
// outcome was recorded. Call it before shutting the HTTP server down: the server waits
// for those requests.
func (h *Handler) Shutdown(ctx context.Context) error {
	f := h.inflight
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		f.cancel()
		return nil
	case <-ctx.Done():
	}
	f.cancel()
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case <-done:
		return fmt.Errorf("webhook batches cancelled at shutdown: %w", context.Cause(ctx))
	case <-t.C:
		return fmt.Errorf("webhook batches still running %s after being cancelled at shutdown: %w", cancelWait, context.Cause(ctx))
	}
}
