package inboxd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// hung is a handler that ignores its context until released (at the latest when the
// test ends), as a careless handler author's time.Sleep(time.Hour) would.
type hung struct {
	entered chan struct{}
	once    sync.Once
	release chan struct{}
}

func newHung(t *testing.T) *hung {
	h := &hung{entered: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(h.free)
	return h
}

func (h *hung) free() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *hung) handle(_ context.Context, _ pgx.Tx, _ inboxd.Event) error {
	h.once.Do(func() { close(h.entered) })
	<-h.release
	return nil
}

// runService starts inboxd with handlers and returns a stop function that cancels it and
// reports how long Run took to return, and what it returned.
func runService(t *testing.T, db *testenv.DB, cfg *inboxd.Config, handlers map[string]inboxd.Handler) (stop func() (time.Duration, error)) {
	t.Helper()
	c := newClient(t, db, *cfg)
	for typ, h := range handlers {
		c.Handle(typ, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	var took time.Duration
	var runErr error
	stop = func() (time.Duration, error) {
		once.Do(func() {
			start := time.Now()
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(2 * time.Minute):
				runErr = fmt.Errorf("Run did not return within 2 minutes")
			}
			took = time.Since(start)
		})
		return took, runErr
	}
	t.Cleanup(func() { stop() })
	return stop
}

func baseConfig(t *testing.T, db *testenv.DB, queue string) *inboxd.Config {
	return &inboxd.Config{
		StompAddr: testenv.Broker(t), Destinations: []string{queue},
		HTTPAddr: testenv.FreeAddr(t), BatchSize: 50, BatchLinger: 5 * time.Millisecond, Prefetch: 200,
		AckMode: "client", DefaultEventType: "hang", Concurrency: 1, MaxAttempts: 3,
		SweepInterval: 50 * time.Millisecond, ShutdownTimeout: 2 * time.Second, StallAfter: 2 * time.Second,
		DisableWebhook: true,
	}
}

func publishN(t *testing.T, addr, queue string, n int, typ string) {
	t.Helper()
	p := stompx.NewPublisher(stompx.Config{Addr: addr}, 1)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		body := fmt.Appendf(nil, `{"id":"00000000-0000-4000-8000-%012d","type":%q}`, i, typ)
		if err := p.Publish(ctx, queue, body, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadyzReportsStuckProcessing: with the only worker held by a hung handler and
// events waiting, /readyz must say processing is stuck, and recover once it moves.
func TestReadyzReportsStuckProcessing(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	cfg := baseConfig(t, db, q)
	h := newHung(t)
	runService(t, db, cfg, map[string]inboxd.Handler{"hang": inboxd.HandlerFunc(h.handle)})
	publishN(t, cfg.StompAddr, q, 5, "hang")
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + cfg.HTTPAddr + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	testenv.Eventually(t, 15*time.Second, "/readyz reports processing stuck", func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, `"processing":"failed"`)
	})
	if !strings.Contains(body, `"ingest":"ok"`) {
		t.Errorf("/readyz = %s, want ingest ok while only processing is stuck", body)
	}
	h.free()
	testenv.Eventually(t, 15*time.Second, "/readyz ready again", func() bool {
		code, b := readyz()
		body = b
		return code == http.StatusOK
	})
}

// TestShutdownBoundedWithHungHandler: SIGTERM with a handler that ignores its context
// must still end Run within INBOXD_SHUTDOWN_TIMEOUT (plus a little), the whole
// sequence, not each step.
func TestShutdownBoundedWithHungHandler(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	q := testenv.Queue(t)
	cfg := baseConfig(t, db, q)
	h := newHung(t)
	stop := runService(t, db, cfg, map[string]inboxd.Handler{"hang": inboxd.HandlerFunc(h.handle)})
	publishN(t, cfg.StompAddr, q, 3, "hang")
	select {
	case <-h.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never ran")
	}
	took, err := stop()
	t.Logf("Run returned %v after %s", err, took.Round(time.Millisecond))
	if took > cfg.ShutdownTimeout+time.Second {
		t.Errorf("shutdown took %s, want at most %s", took, cfg.ShutdownTimeout)
	}
}
