package lifecycle

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// recorder is parts that note when they stop, in order.
type recorder struct {
	mu      sync.Mutex
	stopped []string
}

func (r *recorder) part(name string, linger time.Duration) Part {
	return Part{Name: name, Run: func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(linger) // finishing the work under way
		r.mu.Lock()
		defer r.mu.Unlock()
		r.stopped = append(r.stopped, name)
		return ctx.Err() // a part may return context.Canceled: a clean stop
	}}
}

// Stages stop in the order given, each waited for before the next, and a clean stop
// returns nil.
func TestStagesStopInOrder(t *testing.T) {
	var r recorder
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, quiet, 10*time.Second,
			Stage{Name: "intake", Parts: []Part{r.part("ingest", 20*time.Millisecond)}},
			Stage{Name: "work", Parts: []Part{r.part("sweeper", 0), r.part("relay", 0)}},
			Stage{Name: "serving", Parts: []Part{r.part("api", 0)}})
	}()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if r.stopped[0] != "ingest" || r.stopped[3] != "api" || !slices.Contains(r.stopped[1:3], "sweeper") || !slices.Contains(r.stopped[1:3], "relay") {
		t.Fatalf("stopped in the order %v, want ingest, then the work, then the api", r.stopped)
	}
}

// A part that fails stops the whole group, and Run returns its error, named.
func TestFailureStopsAll(t *testing.T) {
	var r recorder
	boom := errors.New("boom")
	err := Run(context.Background(), quiet, 10*time.Second,
		Stage{Name: "intake", Parts: []Part{{Name: "ingest", Run: func(context.Context) error { return boom }}}},
		Stage{Name: "serving", Parts: []Part{r.part("api", 0)}})
	if !errors.Is(err, boom) || err.Error() != "ingest: boom" {
		t.Fatalf("Run = %v, want ingest: boom", err)
	}
	if len(r.stopped) != 1 {
		t.Fatalf("the api did not stop: %v", r.stopped)
	}
}

// A part that outlives the budget makes Run return ErrShutdownTimeout at the budget,
// naming the part: the operator learns which dependency hung.
func TestBudgetBoundsTheShutdown(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // let the stuck part end before goleak looks
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	err := Run(ctx, quiet, 200*time.Millisecond,
		Stage{Name: "work", Parts: []Part{
			{Name: "stuck", Run: func(context.Context) error { <-release; return nil }},
			{Name: "prompt", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }},
		}})
	if !errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("Run = %v, want ErrShutdownTimeout", err)
	}
	if !strings.HasSuffix(err.Error(), "(still running: stuck)") {
		t.Errorf("Run = %q, want it to name the part still running, and only it", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Run took %s past a 200ms budget", took)
	}
}

func TestSplit(t *testing.T) {
	got := Split(40*time.Second, 1, 2, 1)
	if want := []time.Duration{10 * time.Second, 20 * time.Second, 10 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("Split = %v, want %v", got, want)
	}
}

// Work detached from a stage's stop outlives the stop, not the budget: a commit in
// flight finishes after the stop when it can, and is abandoned when the budget runs
// out (issue 27: ingest's commit to a hung database ran 30 s past a 10 s budget).
func TestDetachEndsWithTheBudget(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	finished, abandoned := make(chan struct{}), make(chan struct{})
	err := Run(ctx, quiet, 300*time.Millisecond, Stage{Name: "work", Parts: []Part{
		{Name: "finishes", Run: func(ctx context.Context) error {
			dctx, done := Detach(ctx)
			defer done()
			<-ctx.Done()
			select {
			case <-dctx.Done():
				t.Error("the stop cancelled the detached work")
			case <-time.After(50 * time.Millisecond):
			}
			close(finished)
			return nil
		}},
		{Name: "hangs", Run: func(ctx context.Context) error {
			dctx, done := Detach(ctx)
			defer done()
			<-dctx.Done() // a commit to a hung database
			close(abandoned)
			return nil
		}},
	}})
	if !errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("Run = %v, want ErrShutdownTimeout", err)
	}
	for name, ch := range map[string]chan struct{}{"finishes": finished, "hangs": abandoned} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the detached work did not end after the budget", name)
		}
	}
	d, done := Detach(context.Background()) // outside Run: only detached
	defer done()
	if d.Err() != nil {
		t.Fatal(d.Err())
	}
}
