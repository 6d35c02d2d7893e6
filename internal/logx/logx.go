// Package logx bounds what inboxd writes to its log: repeated warnings are rate-limited,
// and a failure that repeats is logged once per outage.
package logx

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxLimiterKeys bounds a Limiter's memory whatever keys callers make up.
const maxLimiterKeys = 1024

// Limiter rate-limits repeated log lines: at most one per key per interval. The line
// that passes reports how many were dropped since the last one.
type Limiter struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	keys  map[string]*limiterKey
}

type limiterKey struct {
	last    time.Time
	dropped int
}

// NewLimiter allows one line per key per interval.
func NewLimiter(every time.Duration) *Limiter {
	return &Limiter{every: every, now: time.Now, keys: map[string]*limiterKey{}}
}

// Allow reports whether a line for key may be logged now, and how many lines for key
// were suppressed since the last one allowed.
func (l *Limiter) Allow(key string) (ok bool, dropped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	k := l.keys[key]
	if k == nil {
		if len(l.keys) >= maxLimiterKeys {
			clear(l.keys) // forgetting only lets a few extra lines through
		}
		l.keys[key] = &limiterKey{last: now}
		return true, 0
	}
	if now.Sub(k.last) < l.every {
		k.dropped++
		return false, 0
	}
	dropped, k.dropped, k.last = k.dropped, 0, now
	return true, dropped
}

// Outage logs a failure that repeats while a dependency is away: once when it starts,
// at Level, and once when it ends, with the number of failed attempts and how long it
// took, instead of at every try (at least one a second). Safe for concurrent use.
type Outage struct {
	Log   *slog.Logger
	What  string     // what is away, e.g. "broker"
	Level slog.Level // of the line that opens an outage

	mu    sync.Mutex
	n     int
	since time.Time
}

// Fail records a failed attempt; only the first of an outage is logged above debug.
func (o *Outage) Fail(msg string, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	if o.n == 1 {
		o.since = time.Now()
		o.Log.Log(context.Background(), o.Level, msg, "outage", o.What, "err", err)
		return
	}
	o.Log.Debug(msg, "err", err, "attempt", o.n)
}

// Recovered ends the outage, if there is one, with a line that says what it cost.
func (o *Outage) Recovered(msg string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == 0 {
		return
	}
	o.Log.Info(msg, "outage", o.What, "failed_attempts", o.n, "took", time.Since(o.since).Round(time.Millisecond))
	o.n = 0
}
