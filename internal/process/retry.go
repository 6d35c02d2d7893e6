package process

import (
	"fmt"
	"time"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/defaults"
)

// The default recoverability policy, after NServiceBus (immediate, then delayed
// retries) and River (a delayed schedule long enough to ride out real outages). It is
// the one source of these numbers: the engine's zero values and the command line's
// table of defaults (internal/config) both read them.
//
// An event's handler runs up to 1+DefaultImmediateRetries times in a row within one
// attempt, which absorbs flukes (a dropped connection, a foreign conflict) without a
// recorded failure. A failed attempt is retried after BaseBackoff·2^(n−1), at most
// MaxBackoff, ±10%: 1 s, 2 s, 4 s, … 8 min 32 s, then every 10 min. Attempt 40 is the
// last: an event is DEAD about 5 h 07 min after its first failure (4 h 36 min at
// the least, with jitter), so a dependency down for 10 minutes, or for a few hours,
// leaves no event DEAD; the 10-minute cap bounds how long a recovered dependency waits
// for the retry (River's default goes on for 3 weeks, but a River job does not hold
// back the events after it, and an inbox event does).
// The values live in the one table, package defaults.
const (
	DefaultImmediateRetries = defaults.ImmediateRetries
	DefaultMaxAttempts      = defaults.MaxAttempts
	DefaultBaseBackoff      = defaults.RetryBaseDelay
	DefaultMaxBackoff       = defaults.RetryMaxDelay
)

// backoffJitter is the relative spread of a delay, so that events failing together
// do not all come back at the same instant.
const backoffJitter = 0.1

// RetryPolicy says how a failing event is retried. The zero value of a field means the
// engine's (Config) value, and there the default.
type RetryPolicy struct {
	// ImmediateRetries is how many more times a failing handler runs at once, in the
	// same transaction, before the attempt is recorded as failed. Negative means none.
	ImmediateRetries int
	// MaxAttempts is the number of recorded attempts after which a failing event is
	// DEAD.
	MaxAttempts int
	// BaseBackoff is the delay after the first failed attempt; it doubles per attempt up
	// to MaxBackoff, and each delay is drawn within ±10% of that.
	BaseBackoff time.Duration
	MaxBackoff  time.Duration
}

// DefaultRetryPolicy is the policy of an engine configured with zero values.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{ImmediateRetries: DefaultImmediateRetries, MaxAttempts: DefaultMaxAttempts,
		BaseBackoff: DefaultBaseBackoff, MaxBackoff: DefaultMaxBackoff}
}

// Or returns p with its zero fields taken from q.
func (p RetryPolicy) Or(q RetryPolicy) RetryPolicy {
	if p.ImmediateRetries == 0 {
		p.ImmediateRetries = q.ImmediateRetries
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = q.MaxAttempts
	}
	if p.BaseBackoff <= 0 {
		p.BaseBackoff = q.BaseBackoff
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = q.MaxBackoff
	}
	if p.MaxBackoff < p.BaseBackoff {
		p.MaxBackoff = p.BaseBackoff
	}
	return p
}

func (p RetryPolicy) immediate() int { return max(p.ImmediateRetries, 0) }

// backoff is the schedule as inboxd's one backoff computes it.
func (p RetryPolicy) backoff() backoff.Policy {
	p = p.Or(DefaultRetryPolicy())
	return backoff.Policy{Initial: p.BaseBackoff, Max: p.MaxBackoff, Jitter: backoffJitter}
}

// Delay is the nominal delay before the attempt that follows failed attempt number
// attempt (1-based): BaseBackoff·2^(attempt−1), at most MaxBackoff.
func (p RetryPolicy) Delay(attempt int) time.Duration { return p.backoff().Nominal(attempt) }

// Backoff is Delay with its jitter: a delay drawn from [0.9, 1.1]·Delay(attempt).
func (p RetryPolicy) Backoff(attempt int) time.Duration { return p.backoff().Delay(attempt) }

// Step is one attempt of a schedule.
type Step struct {
	Attempt int
	// At is when the attempt starts, nominally, counted from the first one.
	At time.Duration
	// Delay is the wait after it fails before the next attempt; 0 for the last (DEAD).
	Delay time.Duration
}

// Schedule lists the attempts of p, nominal times (no jitter), the last one DEAD when it
// fails.
func (p RetryPolicy) Schedule() []Step {
	p = p.Or(DefaultRetryPolicy())
	out := make([]Step, 0, p.MaxAttempts)
	var at time.Duration
	for n := 1; n <= p.MaxAttempts; n++ {
		s := Step{Attempt: n, At: at}
		if n < p.MaxAttempts {
			s.Delay = p.Delay(n)
		}
		out = append(out, s)
		at += s.Delay
	}
	return out
}

// Validate reports a policy that cannot work.
func (p RetryPolicy) Validate() error {
	if p.MaxAttempts < 0 || p.BaseBackoff < 0 || p.MaxBackoff < 0 {
		return fmt.Errorf("retry policy %+v: negative attempts or delays", p)
	}
	return nil
}
