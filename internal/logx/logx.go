// Package logx bounds what inboxd writes to its log: repeated warnings are rate-limited.
package logx

import (
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
