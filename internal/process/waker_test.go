package process

import (
	"testing"
	"time"
)

// Kicks that come within the linger wake one worker, once, after it (issue 29: one
// processing transaction per ingest commit at a moderate rate); a worker's hand-off to
// the next does not wait; no linger wakes at once.
func TestKicksWithinTheLingerWakeOnce(t *testing.T) {
	const linger = 500 * time.Millisecond // long beside a loaded machine's scheduling delays
	w := newWaker(linger)
	start := time.Now()
	for range 10 {
		w.kick()
	}
	select {
	case <-w.C():
		t.Fatal("woken before the linger")
	default:
	}
	select {
	case <-w.C():
		if took := time.Since(start); took < linger {
			t.Errorf("woken after %s, before the linger of %s", took, linger)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("never woken")
	}
	// The ten kicks were one wake: nothing else is pending, not even after another linger.
	w.mu.Lock()
	pending := w.timer != nil
	w.mu.Unlock()
	if pending || len(w.ch) != 0 {
		t.Errorf("after the wake: timer pending %v, %d wakes queued; want none", pending, len(w.ch))
	}

	w.kickNow()
	select {
	case <-w.C():
	default:
		t.Error("kickNow did not wake at once")
	}

	none := newWaker(-1)
	none.kick()
	select {
	case <-none.C():
	default:
		t.Error("without a linger, kick did not wake at once")
	}
}
