package process_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 18, item 1: the schedule's arithmetic.
func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	def := process.DefaultRetryPolicy()
	small := process.RetryPolicy{BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxAttempts: 6}
	for _, tt := range []struct {
		name    string
		p       process.RetryPolicy
		attempt int
		want    time.Duration
	}{
		{"default, first failure", def, 1, time.Second},
		{"default, doubles", def, 2, 2 * time.Second},
		{"default, 5th", def, 5, 16 * time.Second},
		{"default, 10th", def, 10, 512 * time.Second},
		{"default, capped from the 11th", def, 11, 10 * time.Minute},
		{"default, stays capped", def, 39, 10 * time.Minute},
		{"default, no overflow", def, 10_000, 10 * time.Minute},
		{"zero policy is the default", process.RetryPolicy{}, 3, 4 * time.Second},
		{"small, first", small, 1, 100 * time.Millisecond},
		{"small, 4th", small, 4, 800 * time.Millisecond},
		{"small, capped", small, 5, time.Second},
		{"max below base is raised to base", process.RetryPolicy{BaseBackoff: time.Minute, MaxBackoff: time.Second}, 3, time.Minute},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Delay(tt.attempt); got != tt.want {
				t.Errorf("Delay(%d) = %s, want %s", tt.attempt, got, tt.want)
			}
			lo, hi := tt.want-tt.want/10, tt.want+tt.want/10
			for i := 0; i < 200; i++ {
				if got := tt.p.Backoff(tt.attempt); got < lo || got > hi {
					t.Fatalf("Backoff(%d) = %s, want within ±10%% of %s", tt.attempt, got, tt.want)
				}
			}
		})
	}
	s := small.Schedule()
	want := []process.Step{{1, 0, 100 * time.Millisecond}, {2, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 300 * time.Millisecond, 400 * time.Millisecond}, {4, 700 * time.Millisecond, 800 * time.Millisecond},
		{5, 1500 * time.Millisecond, time.Second}, {6, 2500 * time.Millisecond, 0}}
	if fmt.Sprint(s) != fmt.Sprint(want) {
		t.Errorf("Schedule() = %v, want %v", s, want)
	}
}

// Issue 18, item 1: the default gives up (DEAD) only hours after the first failure,
// even with every delay at its shortest (−10%): far past a 10-minute outage.
func TestDefaultScheduleOutlastsOutages(t *testing.T) {
	t.Parallel()
	s := process.DefaultRetryPolicy().Schedule()
	last := s[len(s)-1]
	if min := time.Duration(float64(last.At) * 0.9); min < 4*time.Hour {
		t.Errorf("DEAD after %s at the earliest, want at least 4h", min)
	}
	t.Logf("default: %d attempts, the last at %s (at the earliest %s)", last.Attempt, last.At, time.Duration(float64(last.At)*0.9))
}

// Policies merge field by field: an event type's own, then the engine's, then the defaults.
func TestRetryPolicyOr(t *testing.T) {
	t.Parallel()
	engine := process.RetryPolicy{MaxAttempts: 7, BaseBackoff: 2 * time.Second}.Or(process.DefaultRetryPolicy())
	own := process.RetryPolicy{MaxAttempts: 3, ImmediateRetries: -1}.Or(engine)
	want := process.RetryPolicy{ImmediateRetries: -1, MaxAttempts: 3, BaseBackoff: 2 * time.Second, MaxBackoff: process.DefaultMaxBackoff}
	if own != want {
		t.Errorf("merged %+v, want %+v", own, want)
	}
}

// outage is a dependency that is down until a moment, and a handler that calls it.
// Its effect is a row in test_effects, so pt.Check sees the order of application.
type outage struct {
	until time.Time
	mu    sync.Mutex
	calls map[string]int
	// appliedAt and failed record, per event, when its effect was applied and its
	// attempt number then, relative to start.
	start     time.Time
	appliedAt map[string]time.Duration
	attempt   map[string]int
	lastFail  map[string]int // the attempt number of the last failure
}

func newOutage(d time.Duration) *outage {
	now := time.Now()
	return &outage{start: now, until: now.Add(d), calls: map[string]int{}, appliedAt: map[string]time.Duration{},
		attempt: map[string]int{}, lastFail: map[string]int{}}
}

func (o *outage) Handle(ctx context.Context, tx pgx.Tx, ev process.Event) error {
	o.mu.Lock()
	o.calls[ev.ID]++
	o.mu.Unlock()
	if time.Now().Before(o.until) {
		o.mu.Lock()
		o.lastFail[ev.ID] = ev.Attempt
		o.mu.Unlock()
		return errors.New("ledger: connection refused")
	}
	if _, err := tx.Exec(ctx, `INSERT INTO test_effects (event_id, aggregate_id, sequence_no) VALUES ($1, $2, $3)`,
		ev.ID, ev.AggregateID, ev.SequenceNo); err != nil {
		return err
	}
	o.mu.Lock()
	o.appliedAt[ev.ID], o.attempt[ev.ID] = time.Since(o.start), ev.Attempt
	o.mu.Unlock()
	return nil
}

// scaled is the default policy with every delay divided by k: a real run against
// PostgreSQL, k times faster.
func scaled(k int) process.Config {
	d := process.DefaultRetryPolicy()
	return process.Config{ImmediateRetries: d.ImmediateRetries, MaxAttempts: d.MaxAttempts,
		BaseBackoff: d.BaseBackoff / time.Duration(k), MaxBackoff: d.MaxBackoff / time.Duration(k)}
}

// Issue 18, item 1: a dependency down for 10 minutes, with the default schedule (time
// scaled down 300 times: the outage lasts 2 s, the first delay 3 ms): no event is DEAD,
// and each is applied once it is back. It logs where the event stood when the
// dependency returned and when it was applied, in unscaled time.
func TestTenMinuteOutageWithDefaults(t *testing.T) {
	t.Parallel()
	const k = 300
	db := testenv.NewDB(t)
	pt.NewEffects(t, db.Pool)
	o := newOutage(10 * time.Minute / k)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, o)
	e := process.New(db.Pool, reg, scaled(k), nil, nil)
	ids := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{Aggregate: "x"}), pt.Payload(pt.Spec{Aggregate: "y"}))
	runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: time.Millisecond, Grace: 0, BatchSize: 10}))
	testenv.Eventually(t, 30*time.Second, "both applied", func() bool { return pt.CountStatus(t, db.Pool, "PROCESSED") == 2 })
	if n := pt.CountStatus(t, db.Pool, "DEAD"); n != 0 {
		t.Fatalf("%d events DEAD", n)
	}
	pt.Check(t, db.Pool)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		t.Logf("10-minute outage, default schedule: failed up to attempt %d (%d handler runs with the immediate retries), "+
			"applied at attempt %d, %s after the first failure (%s after the dependency returned)",
			o.lastFail[id], o.calls[id], o.attempt[id], (o.appliedAt[id] * k).Round(time.Second), (o.appliedAt[id]*k - 10*time.Minute).Round(time.Second))
		if o.attempt[id] < 2 {
			t.Errorf("applied at attempt %d: the outage was not felt", o.attempt[id])
		}
	}
}

// Issue 18, item 1, as reported: a program with the defaults, its handler's dependency
// down for 45 s; e1 of aggregate X, then e2 of X five seconds later. Both were DEAD
// about 15 s after their first failure. Now neither is DEAD, and e1 is applied before
// e2. Time scaled down 30 times (a real run against PostgreSQL).
func TestFortyFiveSecondOutageKeepsOrder(t *testing.T) {
	t.Parallel()
	const k = 30
	db := testenv.NewDB(t)
	pt.NewEffects(t, db.Pool)
	o := newOutage(45 * time.Second / k)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, o)
	e := process.New(db.Pool, reg, scaled(k), nil, nil)
	runSweeper(t, process.NewSweeper(e, process.SweeperConfig{Interval: 5 * time.Millisecond, Grace: 0, BatchSize: 10}))
	e1 := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{Aggregate: "X"}))[0]
	e.Kick()
	time.Sleep(5 * time.Second / k) // e2 is published five (scaled) seconds later: the scenario, not a wait for an outcome
	e2 := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{Aggregate: "X"}))[0]
	e.Kick()
	testenv.Eventually(t, 30*time.Second, "e1 and e2 applied", func() bool { return pt.CountStatus(t, db.Pool, "PROCESSED") == 2 })
	if n := pt.CountStatus(t, db.Pool, "DEAD"); n != 0 {
		t.Fatalf("%d events DEAD", n)
	}
	pt.Check(t, db.Pool) // each applied once, in sequence order within X
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.appliedAt[e1] > o.appliedAt[e2] {
		t.Errorf("e2 applied before e1")
	}
	t.Logf("e1 applied at attempt %d, %s; e2 at attempt %d, %s (unscaled, from e1's first failure)",
		o.attempt[e1], (o.appliedAt[e1] * k).Round(time.Second), o.attempt[e2], (o.appliedAt[e2] * k).Round(time.Second))
}

// Immediate retries absorb a fluke: no failure is recorded. A per-type policy overrides
// the engine's.
func TestImmediateRetriesAndPerTypePolicy(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	var mu sync.Mutex
	calls := map[string]int{}
	flaky := process.HandlerFunc(func(_ context.Context, _ pgx.Tx, ev process.Event) error {
		mu.Lock()
		defer mu.Unlock()
		calls[ev.ID]++
		if ev.Type == "strict" || calls[ev.ID] == 1 {
			return errors.New("fluke")
		}
		return nil
	})
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, flaky)
	reg.Register("strict", flaky)
	reg.SetRetryPolicy("strict", process.RetryPolicy{ImmediateRetries: -1, MaxAttempts: 1})
	e := process.New(db.Pool, reg, process.Config{}, nil, nil) // the defaults: 2 immediate retries
	ids := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{Aggregate: "a"}), pt.Payload(pt.Spec{Aggregate: "b", Type: "strict"}))
	if _, _, err := e.ProcessDue(context.Background(), 0, 10, nil); err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		status journal.Status
		calls  int
	}{{"PROCESSED", 2}, {"DEAD", 1}} {
		status, attempts, _ := pt.Status(t, db.Pool, ids[i])
		if status != want.status || attempts != 1 || calls[ids[i]] != want.calls {
			t.Errorf("event %d: %s, %d attempts, %d calls; want %s, 1, %d", i, status, attempts, calls[ids[i]], want.status, want.calls)
		}
	}
}
