package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestPolicy(t *testing.T) {
	for _, tt := range []struct {
		name    string
		p       Policy
		attempt int
		nominal time.Duration
		lo, hi  time.Duration // every jittered delay falls within
	}{
		{"zero is Reconnect: first wait 50-100ms", Policy{}, 1, 75 * ms, 50 * ms, 100 * ms},
		{"reconnect doubles", Reconnect, 2, 150 * ms, 100 * ms, 200 * ms},
		{"reconnect, 3rd", Reconnect, 3, 300 * ms, 200 * ms, 400 * ms},
		{"reconnect capped: at least one try a second", Reconnect, 5, 750 * ms, 500 * ms, time.Second},
		{"reconnect, no overflow", Reconnect, 10_000, 750 * ms, 500 * ms, time.Second},
		{"attempt 0 counts as 1", Reconnect, 0, 75 * ms, 50 * ms, 100 * ms},
		{"only Initial set: Max and Jitter from Reconnect", Policy{Initial: 150 * ms}, 1, 150 * ms, 100 * ms, 200 * ms},
		{"±10%", Policy{Initial: time.Second, Max: 10 * time.Minute, Jitter: 0.1}, 10, 512 * time.Second, 460800 * ms, 563200 * ms},
		{"±10%, capped", Policy{Initial: time.Second, Max: 10 * time.Minute, Jitter: 0.1}, 11, 10 * time.Minute, 9 * time.Minute, 11 * time.Minute},
		{"no jitter", Policy{Initial: time.Second, Max: 5 * time.Minute, Jitter: -1}, 4, 8 * time.Second, 8 * time.Second, 8 * time.Second},
		{"no jitter, capped", Policy{Initial: time.Second, Max: 5 * time.Minute, Jitter: -1}, 20, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute},
		{"max below initial is raised to it", Policy{Initial: time.Minute, Max: time.Second, Jitter: -1}, 3, time.Minute, time.Minute, time.Minute},
		{"jitter above 1 is 1", Policy{Initial: time.Second, Jitter: 5}, 1, time.Second, 0, 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Nominal(tt.attempt); got != tt.nominal {
				t.Errorf("Nominal(%d) = %s, want %s", tt.attempt, got, tt.nominal)
			}
			for range 500 {
				if got := tt.p.Delay(tt.attempt); got < tt.lo || got > tt.hi {
					t.Fatalf("Delay(%d) = %s, want within [%s, %s]", tt.attempt, got, tt.lo, tt.hi)
				}
			}
		})
	}
}

func TestWaiter(t *testing.T) {
	var w Waiter // Reconnect
	for i, hi := range []time.Duration{100 * ms, 200 * ms, 400 * ms, 800 * ms, time.Second, time.Second} {
		if got := w.Next(); got < hi/2 || got > hi {
			t.Errorf("delay %d = %s, want within [%s, %s]", i, got, hi/2, hi)
		}
	}
	if w.Attempt() != 6 {
		t.Errorf("Attempt() = %d, want 6", w.Attempt())
	}
	w.Reset()
	if w.Attempt() != 0 {
		t.Errorf("after Reset, Attempt() = %d, want 0", w.Attempt())
	}
	if got := w.Next(); got > 100*ms {
		t.Errorf("after Reset, delay = %s, want at most 100ms", got)
	}
}

func TestWaitHonorsContext(t *testing.T) {
	w := Waiter{Policy: Policy{Initial: time.Hour}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	w = Waiter{Policy: Policy{Initial: ms, Jitter: -1}}
	if err := w.Wait(context.Background()); err != nil || w.Attempt() != 1 {
		t.Fatalf("Wait = %v with Attempt() %d, want nil and 1", err, w.Attempt())
	}
}
