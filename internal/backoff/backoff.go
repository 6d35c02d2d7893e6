// Package backoff is inboxd's one backoff: a delay that doubles per attempt from an
// initial value up to a cap, drawn within a jitter around that nominal value. A Policy
// computes delays (the engine's retry schedule, the outbox's per-row retries); a Waiter
// sleeps them in a reconnect loop (broker, database, LISTEN) or between the tries of a
// conflicting transaction (Conflict).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Reconnect paces reconnect loops: waits of 50–100 ms at first, doubling up to 0.5–1 s,
// so that an outage heals within a second of its end, and a restart storm of many
// instances is spread over that second without ever hot-looping. It is what a zero
// Policy field means.
var Reconnect = Policy{Initial: 75 * time.Millisecond, Max: 750 * time.Millisecond, Jitter: 1.0 / 3}

// Conflict paces the retries of a transaction that conflicted (SQLSTATE 40001): the
// pause doubles from 10 ms to 500 ms, ±50 %, so that the transaction it conflicted
// with, which can take hundreds of milliseconds on a loaded machine, has ended before
// the last tries. Ingest's statements and processing's batches retry by it; pauses of
// at most 10 ms gave up within a few hundred milliseconds under load.
var Conflict = Policy{Initial: 10 * time.Millisecond, Max: 500 * time.Millisecond, Jitter: 0.5}

// Policy says how long to wait after a failed attempt: Initial·2^(attempt−1), at most
// Max, drawn within ±Jitter of that. A zero field takes Reconnect's value.
type Policy struct {
	// Initial is the nominal delay after the first failure.
	Initial time.Duration
	// Max caps the nominal delay; one below Initial is raised to it.
	Max time.Duration
	// Jitter is the relative spread of a delay around its nominal value, in (0, 1], so
	// that many waiters failing together do not all come back at the same instant.
	// Negative means none.
	Jitter float64
}

func (p Policy) withDefaults() Policy {
	if p.Initial <= 0 {
		p.Initial = Reconnect.Initial
	}
	if p.Max <= 0 {
		p.Max = Reconnect.Max
	}
	p.Max = max(p.Max, p.Initial)
	switch {
	case p.Jitter == 0:
		p.Jitter = Reconnect.Jitter
	case p.Jitter < 0:
		p.Jitter = 0
	case p.Jitter > 1:
		p.Jitter = 1 // a delay is never negative
	}
	return p
}

// Nominal is the delay after failed attempt number attempt (1-based; lower counts as
// 1), without jitter: Initial·2^(attempt−1), at most Max.
func (p Policy) Nominal(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.Initial
	for i := 1; i < attempt && d < p.Max; i++ { // stops at the cap: no overflow
		d *= 2
	}
	return min(d, p.Max)
}

// Delay is Nominal with its jitter: drawn uniformly from [1−Jitter, 1+Jitter]·Nominal.
func (p Policy) Delay(attempt int) time.Duration {
	p = p.withDefaults()
	d := p.Nominal(attempt)
	spread := time.Duration(float64(d) * p.Jitter)
	return d - spread + rand.N(2*spread+1)
}

// Waiter sleeps a Policy's delays, one attempt further each time, in a loop that
// retries until something works. Its zero value waits by Reconnect. A Waiter is not safe
// for concurrent use; give each loop its own.
type Waiter struct {
	Policy  Policy
	attempt int
}

// Next returns the next delay and counts the attempt.
func (w *Waiter) Next() time.Duration {
	w.attempt++
	return w.Policy.Delay(w.attempt)
}

// Attempt is the number of delays handed out since the last Reset.
func (w *Waiter) Attempt() int { return w.attempt }

// Reset starts over from Initial, after a success.
func (w *Waiter) Reset() { w.attempt = 0 }

// Wait sleeps for Next(), or until ctx ends and then returns its error.
func (w *Waiter) Wait(ctx context.Context) error {
	t := time.NewTimer(w.Next())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
