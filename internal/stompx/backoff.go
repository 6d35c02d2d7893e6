package stompx

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields capped, jittered, exponentially growing delays for reconnect loops
// (broker and database alike). The zero value is usable: 100ms doubling up to 1s, so
// that an outage heals within about a second of its end; the jitter spreads a restart
// storm of many instances over that second. It is inboxd's only backoff for reconnects.
// A Backoff is not safe for concurrent use; give each loop its own.
type Backoff struct {
	Initial time.Duration // first delay, default 100ms
	Max     time.Duration // cap, default 1s
	// Jitter is the fraction of each delay that is randomized, in [0,1]; default 0.5.
	// Equal jitter keeps a floor (so a restart storm is still spread but never hot-loops).
	Jitter float64

	attempt int
}

func (b *Backoff) defaults() (initial, max time.Duration, jitter float64) {
	initial, max, jitter = b.Initial, b.Max, b.Jitter
	if initial <= 0 {
		initial = 100 * time.Millisecond
	}
	if max <= 0 {
		max = time.Second
	}
	if max < initial {
		max = initial
	}
	if jitter <= 0 || jitter > 1 {
		jitter = 0.5
	}
	return initial, max, jitter
}

// Next returns the next delay and advances the attempt counter.
func (b *Backoff) Next() time.Duration {
	initial, max, jitter := b.defaults()
	d := initial
	for i := 0; i < b.attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	b.attempt++
	spread := time.Duration(float64(d) * jitter)
	if spread <= 0 {
		return d
	}
	return d - spread + rand.N(spread+1)
}

// Attempt is the number of delays handed out since the last Reset.
func (b *Backoff) Attempt() int { return b.attempt }

// Reset starts over from Initial, after a success.
func (b *Backoff) Reset() { b.attempt = 0 }

// Wait sleeps for Next() or until ctx is done, and returns ctx's error in that case.
func (b *Backoff) Wait(ctx context.Context) error {
	t := time.NewTimer(b.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
