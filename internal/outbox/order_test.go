package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/sqlbound"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/testenv/stomptest"
)

// Test headers: the message's group and its place in the group's emit order.
const (
	hdrGroup = "aggregate-id"
	hdrN     = "order-n"
)

// groupMsg is message n (1-based, emit order) of group g.
func groupMsg(dest, g string, n int) Outgoing {
	return Outgoing{Destination: dest, Body: fmt.Appendf(nil, `{"g":%q,"n":%d}`, g, n),
		Headers: map[string]string{hdrGroup: g, "JMSXGroupID": g, hdrN: strconv.Itoa(n)}}
}

// orderLog records, per group, the order in which messages arrived (first arrival of
// each outbox id only: a redelivered duplicate is the receiver's to drop).
type orderLog struct {
	mu       sync.Mutex
	seen     map[string]bool
	maxN     map[string]int
	outOrder int
	distinct int
}

func newOrderLog() *orderLog { return &orderLog{seen: map[string]bool{}, maxN: map[string]int{}} }

func (l *orderLog) add(id, g string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[id] {
		return
	}
	l.seen[id] = true
	l.distinct++
	if n < l.maxN[g] {
		l.outOrder++ // an earlier message of g arrives after a later one
	}
	l.maxN[g] = max(l.maxN[g], n)
}

func (l *orderLog) get() (distinct, outOfOrder int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.distinct, l.outOrder
}

// consumeOrdered subscribes to dest until the test ends and logs arrival order per group.
func consumeOrdered(t *testing.T, addr, dest string) *orderLog {
	t.Helper()
	l := newOrderLog()
	ctx, cancel := context.WithCancel(context.Background())
	conn, err := stompx.Dial(ctx, stomptest.Config(addr))
	if err != nil {
		cancel()
		t.Fatalf("dialing %s: %v", addr, err)
	}
	sub, err := conn.Subscribe(dest, stomp.AckClientIndividual)
	if err != nil {
		cancel()
		t.Fatalf("subscribing to %s: %v", dest, err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done; conn.MustDisconnect() })
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-sub.C:
				if !ok || m.Err != nil {
					return
				}
				n, _ := strconv.Atoi(m.Header.Get(hdrN))
				l.add(m.Header.Get(HeaderOutboxID), m.Header.Get(hdrGroup), n)
				if conn.Ack(m) != nil {
					return
				}
			}
		}
	}()
	return l
}

// Issue 18, finding 4, exactly as reproduced: 300 events each emit messages 1, 2 and 3
// of their own group in one transaction (so the three rows share created_at), and the
// relay publishes to the real ActiveMQ. Every group must arrive in emit order. Before
// the fix 355–362 of the 900 arrived out of order.
func TestGroupOrderEmittedInOneTransaction(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"Emit", "EmitBatch"} {
		t.Run(how, func(t *testing.T) {
			db := testenv.NewDB(t)
			addr := testenv.Broker(t)
			dest := testenv.Queue(t)
			ctx := context.Background()
			got := consumeOrdered(t, addr, dest)
			pub := stompx.NewPublisher(stomptest.Config(addr), 4)
			t.Cleanup(func() { _ = pub.Close() })
			runRelay(t, db.Pool, pub, Config{PollInterval: 50 * time.Millisecond})

			const events, perEvent = 300, 3
			var wg sync.WaitGroup
			errs := make(chan error, events)
			for w := range 4 { // four workers, as the engine's batches would commit side by side
				wg.Add(1)
				go func() {
					defer wg.Done()
					for e := w; e < events; e += 4 {
						g := fmt.Sprintf("agg-%03d", e)
						errs <- pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
							msgs := make([]Outgoing, perEvent)
							for n := range perEvent {
								msgs[n] = groupMsg(dest, g, n+1)
							}
							if how == "EmitBatch" {
								_, err := EmitBatch(ctx, tx, msgs)
								return err
							}
							for _, m := range msgs {
								if _, err := Emit(ctx, tx, m); err != nil {
									return err
								}
							}
							return nil
						})
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			testenv.Eventually(t, 90*time.Second, "all 900 messages received", func() bool {
				d, _ := got.get()
				return d == events*perEvent
			})
			d, out := got.get()
			t.Logf("%d messages of %d groups received, %d out of emit order", d, events, out)
			if out != 0 {
				t.Errorf("%d of %d messages arrived out of their group's emit order, want 0", out, d)
			}
		})
	}
}

// groupRecorder is a Publisher that checks, at the start of every publish, that every
// earlier message of the same group has been published successfully; failFirst makes
// the first attempt of the named messages fail.
type groupRecorder struct {
	mu         sync.Mutex
	ok         map[string]map[int]bool // group → n published
	violations []string
	log        []string // "g/n" of every successful publish, in order
	failFirst  map[string]bool
	failRate   float64
	failures   int
	maxDelay   time.Duration
}

func newGroupRecorder() *groupRecorder {
	return &groupRecorder{ok: map[string]map[int]bool{}, failFirst: map[string]bool{}}
}

var errInjected = errors.New("injected publish failure")

func (r *groupRecorder) Publish(ctx context.Context, _ string, _ []byte, h map[string]string) error {
	g := h[hdrGroup]
	n, _ := strconv.Atoi(h[hdrN])
	key := g + "/" + strconv.Itoa(n)
	r.mu.Lock()
	for k := 1; k < n; k++ {
		if !r.ok[g][k] {
			r.violations = append(r.violations, fmt.Sprintf("%s started before %s/%d was published", key, g, k))
			break
		}
	}
	fail := r.failFirst[key] || (r.failRate > 0 && rand.Float64() < r.failRate)
	delete(r.failFirst, key)
	r.mu.Unlock()
	if r.maxDelay > 0 {
		time.Sleep(rand.N(r.maxDelay)) // a broker's receipt takes a while: widen the race
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if fail {
		r.failures++
		return fmt.Errorf("%s: %w", key, errInjected)
	}
	if r.ok[g] == nil {
		r.ok[g] = map[int]bool{}
	}
	r.ok[g][n] = true
	r.log = append(r.log, key)
	return nil
}

func (r *groupRecorder) snapshot() (violations, log []string, failures int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.violations...), append([]string(nil), r.log...), r.failures
}

// Issue 18, finding 4 (by review): a row whose first publish fails must hold up the
// later rows of its group (they used to go out at once while it waited ≥ 1 s), and only
// those: another group goes on meanwhile.
func TestGroupHeadFailureHoldsSuccessors(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	for _, g := range []string{"blocked", "free"} {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			for n := 1; n <= 3; n++ {
				if _, err := Emit(ctx, tx, groupMsg("/queue/x", g, n)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec := newGroupRecorder()
	rec.failFirst["blocked/1"] = true
	runRelay(t, db.Pool, rec, Config{PollInterval: 20 * time.Millisecond})
	testenv.Eventually(t, 30*time.Second, "all six rows sent", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`) == 0
	})
	violations, log, failures := rec.snapshot()
	t.Logf("publish order: %v (%d failures)", log, failures)
	for _, v := range violations {
		t.Error(v)
	}
	if failures != 1 {
		t.Errorf("%d failed publishes, want the one injected", failures)
	}
	// The free group does not wait for the blocked one's retry.
	pos := map[string]int{}
	for i, k := range log {
		pos[k] = i
	}
	if pos["free/3"] > pos["blocked/1"] {
		t.Errorf("group free finished after blocked/1's retry (%v): one group's failure held up another", log)
	}
}

// Issue 18, finding 4 (by review): two relays never publish parts of one group at once
// or out of order, while publishes fail at random and are retried. Every group's rows
// come from five transactions, each emitting one row of every group, and the relays
// claim small batches, so a group's rows are spread over many claims.
func TestTwoRelaysKeepGroupOrder(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	const groups, perGroup = 100, 5
	for n := 1; n <= perGroup; n++ {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			for g := range groups {
				if _, err := Emit(ctx, tx, groupMsg("/queue/x", fmt.Sprintf("g%03d", g), n)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	rec := newGroupRecorder()
	rec.failRate, rec.maxDelay = 0.02, 2*time.Millisecond
	for range 2 {
		pool, err := pgxpool.New(ctx, db.URL) // a pool per "instance"
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		runRelay(t, pool, rec, Config{BatchSize: 15, PollInterval: 20 * time.Millisecond})
	}
	testenv.Eventually(t, 120*time.Second, "every row sent", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`) == 0
	})
	violations, log, failures := rec.snapshot()
	t.Logf("%d rows published, %d injected failures, %d order violations", len(log), failures, len(violations))
	for i, v := range violations {
		if i == 10 {
			t.Errorf("… and %d more", len(violations)-10)
			break
		}
		t.Error(v)
	}
}

// EmitBatch writes a batch in the order given (seq), reports ids already used (before,
// or earlier in the batch) as duplicates, refuses an invalid message with its index
// and writes nothing then, derives each row's group, and splits a batch past
// sqlbound.DefaultMaxStatementBytes into statements that keep the order.
func TestEmitBatch(t *testing.T) {
	// Through a proxy that refuses, as CockroachDB does, a client message over 16 MiB.
	db, proxy := testenv.NewLimitedDB(t, sqlbound.ServerLimit)
	ctx := context.Background()
	pre := DerivedID("pre")
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := Emit(ctx, tx, Outgoing{ID: pre, Destination: "/queue/a"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, MaxBodyBytes)
	again := DerivedID("again")
	msgs := []Outgoing{
		{Destination: "/queue/a", Group: "explicit", Headers: map[string]string{"JMSXGroupID": "ignored"}},
		{Destination: "/queue/a", Headers: map[string]string{"JMSXGroupID": "jms", "aggregate-id": "ignored"}},
		{Destination: "/queue/a", Headers: map[string]string{"aggregate-id": "agg"}},
		{Destination: "/queue/a"},
		{ID: pre, Destination: "/queue/a"},
		{ID: again, Destination: "/queue/a"},
		{ID: again, Destination: "/queue/a"},
	}
	for range 2 * sqlbound.DefaultMaxStatementBytes / MaxBodyBytes { // three statements
		msgs = append(msgs, Outgoing{Destination: "/queue/a", Body: big, Group: "big"})
	}
	var got []Emitted
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		got, err = EmitBatch(ctx, tx, msgs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	wantDup := map[int]bool{4: true, 6: true}
	var prevSeq int64
	for i, e := range got {
		if e.Duplicate != wantDup[i] {
			t.Errorf("message %d: duplicate = %v, want %v", i, e.Duplicate, wantDup[i])
		}
		if e.Duplicate {
			continue
		}
		var seq int64
		var grp *string
		if err := db.Pool.QueryRow(ctx, `SELECT seq, grp FROM outbox WHERE id = $1`, e.ID).Scan(&seq, &grp); err != nil {
			t.Fatalf("message %d (%s): %v", i, e.ID, err)
		}
		if seq <= prevSeq {
			t.Errorf("message %d: seq %d after %d, want increasing in batch order", i, seq, prevSeq)
		}
		prevSeq = seq
		want := map[int]string{0: "explicit", 1: "jms", 2: "agg", 3: ""}[i]
		if i > 6 {
			want = "big"
		}
		if g := ""; grp != nil {
			if g = *grp; g != want {
				t.Errorf("message %d: group %q, want %q", i, g, want)
			}
		} else if want != "" {
			t.Errorf("message %d: no group, want %q", i, want)
		}
	}
	if proxy.Refused() > 0 || proxy.Largest() > sqlbound.DefaultMaxStatementBytes {
		t.Errorf("largest client message %d bytes (%d refused), want at most %d", proxy.Largest(), proxy.Refused(), sqlbound.DefaultMaxStatementBytes)
	}
	// Distinct sequence blocks: the big messages took more than one statement.
	if n := count(t, db.Pool, `SELECT count(DISTINCT seq / `+strconv.Itoa(SeqBlock)+`) FROM outbox`); n < 4 {
		t.Errorf("%d sequence blocks, want ≥ 4 (one emit + three statements for %d MiB)", n, 2*sqlbound.DefaultMaxStatementBytes>>20)
	}

	before := count(t, db.Pool, `SELECT count(*) FROM outbox`)
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := EmitBatch(ctx, tx, []Outgoing{{Destination: "/queue/ok"}, {Destination: "/queue/a,/queue/b"}})
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Index != 1 || !errors.Is(err, ErrInvalid) {
			return fmt.Errorf("invalid second message: got %v, want an InvalidError at 1", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if after := count(t, db.Pool, `SELECT count(*) FROM outbox`); after != before {
		t.Errorf("%d rows written by a refused batch", after-before)
	}
}

// A row of a group whose stored headers cannot be decoded (written around Emit) holds
// its group's later rows, which must not overtake it; the earlier ones and other groups
// are published.
func TestPoisonRowHoldsItsGroupOnly(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		for n := 1; n <= 3; n++ {
			if _, err := Emit(ctx, tx, groupMsg("/queue/x", "poisoned", n)); err != nil {
				return err
			}
			if _, err := Emit(ctx, tx, groupMsg("/queue/x", "healthy", n)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET headers = '[1,2]' WHERE headers->>'aggregate-id' = 'poisoned' AND headers->>'order-n' = '2'`); err != nil {
		t.Fatal(err)
	}
	rec := newGroupRecorder()
	runRelay(t, db.Pool, rec, Config{PollInterval: 20 * time.Millisecond})
	testenv.Eventually(t, 30*time.Second, "the poison row's failure recorded", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM outbox WHERE last_error LIKE '%not an object%'`) == 1 &&
			count(t, db.Pool, `SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL`) == 4
	})
	// A few more passes: the third poisoned row must still wait.
	for range 3 {
		if _, err := NewRelay(db.Pool, rec, Config{}, nil, nil).RelayOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	violations, log, _ := rec.snapshot()
	for _, v := range violations {
		t.Error(v)
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM outbox WHERE sent_at IS NULL`); n != 2 {
		t.Errorf("%d rows unsent, want the poison row and the one behind it (published: %v)", n, log)
	}
}
