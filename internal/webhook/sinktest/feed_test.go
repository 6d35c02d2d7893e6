package sinktest_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/database"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
	"github.com/inboxd/inboxd/internal/webhook/sinktest"
)

// recorder is a webhook that checks what the emulated sink sends, and misbehaves on
// purpose: it answers 500 to the first post of some batches and outlasts the client's
// timeout on the first post of others.
type recorder struct {
	t        *testing.T
	maxBatch int
	slow     time.Duration
	// failTries: the first failTries posts of a faulty batch fail; faults bounds the
	// faulty batches, so that the feed converges.
	failTries, faults int
	// kinds alternates the faulty batches between a 500 and a timeout, so that each
	// run sees both (drawn from the ids, a run could see only one kind).
	kinds   int
	faultOf map[string]int // the fault of each faulty batch, by body

	mu        sync.Mutex
	bodies    map[string]int  // posts by body
	delivered map[string]int  // 2xx answers by row id
	inFlight  map[string]bool // row ids of batches being answered normally
	resolved  []string
	status    map[int]int
}

func (r *recorder) fail(format string, args ...any) { r.t.Errorf(format, args...) }

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, err := io.ReadAll(req.Body)
	if err != nil {
		// The sink's client timeout ended the request mid-body (a loaded machine): it
		// retries the batch, as the emulated sink does, so there is nothing to check.
		return
	}
	var resolved webhook.ResolvedMessage
	if json.Unmarshal(b, &resolved) == nil && resolved.Resolved != "" {
		r.mu.Lock()
		defer r.mu.Unlock()
		if len(r.inFlight) > 0 {
			r.fail("resolved message while %d rows are in flight: the sink flushes first", len(r.inFlight))
		}
		r.resolved = append(r.resolved, resolved.Resolved)
		w.WriteHeader(http.StatusOK)
		return
	}
	var batch webhook.Batch
	if err := json.Unmarshal(b, &batch); err != nil || batch.Length != len(batch.Payload) || len(batch.Payload) == 0 {
		r.t.Errorf("not a batch: %s", b)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	ids := make([]string, len(batch.Payload))
	for i, row := range batch.Payload {
		var m struct {
			After struct {
				ID string `json:"id"`
			} `json:"after"`
			Updated string `json:"updated"`
		}
		if err := json.Unmarshal(row, &m); err != nil || m.After.ID == "" || m.Updated == "" {
			r.t.Errorf("row is not {after, updated}: %s", row)
		}
		ids[i] = m.After.ID
	}
	r.mu.Lock()
	r.bodies[string(b)]++
	try := r.bodies[string(b)]
	if len(ids) > r.maxBatch {
		r.fail("batch of %d rows, over Flush.Messages %d", len(ids), r.maxBatch)
	}
	// The first posts of some batches (picked by their first id) fail, in turn with a
	// 500 and by outlasting the client's timeout.
	fault := r.faultOf[string(b)]
	if try == 1 && r.faults > 0 && int(ids[0][0])%3 != 0 {
		fault = 1 + r.kinds%2
		r.kinds++
		r.faultOf[string(b)] = fault
	}
	if try > r.failTries {
		fault = 0
	} else if fault != 0 && try == r.failTries {
		r.faults--
	}
	if fault != 2 {
		mine := map[string]bool{} // one batch can hold several versions of a row
		for _, id := range ids {
			if r.inFlight[id] && !mine[id] {
				r.fail("row %s in two batches in flight", id)
			}
			r.inFlight[id], mine[id] = true, true
		}
	}
	r.mu.Unlock()
	status := http.StatusOK
	switch fault {
	case 1:
		status = http.StatusInternalServerError
	case 2:
		t := time.NewTimer(r.slow) // outlast the client's timeout
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
		}
		return
	}
	r.mu.Lock()
	for _, id := range ids {
		delete(r.inFlight, id)
		if status == http.StatusOK {
			r.delivered[id]++
		}
	}
	r.status[status]++
	r.mu.Unlock()
	w.WriteHeader(status)
}

// The emulator behaves like the webhook sink: batches up to Flush.Messages, retries on
// 5xx and on its client timeout, never two batches holding one key in flight, resolved
// messages unwrapped and only once every batch before them was answered 2xx,
// duplicates and replays, and a job restart (replay from the checkpoint) when a finite
// Retry.Max runs out.
func TestFeedSemantics(t *testing.T) {
	db := testenv.NewDB(t)
	var payloads [][]byte
	for range 60 {
		payloads = append(payloads, pt.Payload(pt.Spec{}))
	}
	ids := pt.Ingest(t, db.Pool, payloads...)
	for _, tt := range []struct {
		name     string
		retryMax int
	}{{"retry forever", 0}, {"retry max 1", 1}} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{t: t, maxBatch: 8, slow: time.Second, failTries: tt.retryMax + 1, faults: 8, bodies: map[string]int{}, faultOf: map[string]int{}, delivered: map[string]int{},
				inFlight: map[string]bool{}, status: map[int]int{}}
			srv := httptest.NewServer(rec)
			t.Cleanup(srv.Close)
			client := &http.Client{Timeout: 100 * time.Millisecond}
			feed := &sinktest.Feed{DB: db.Pool, Sink: &sinktest.Sink{URLs: []string{srv.URL}, Client: client},
				FlushMessages: 8, FlushFrequency: 20 * time.Millisecond, RetryMax: tt.retryMax,
				Backoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Workers: 3,
				Resolved: 100 * time.Millisecond, Duplicates: 0.3, Replays: 0.3, Seed: 7}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- feed.Run(ctx) }()
			testenv.Eventually(t, 30*time.Second, "every row delivered and a resolved message after", func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				for _, id := range ids {
					if rec.delivered[id] == 0 {
						return false
					}
				}
				return len(rec.resolved) >= 2
			})
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil once its context is cancelled", err)
			}
			st, sk := feed.Stats(), feed.Sink.Stats()
			t.Logf("feed %+v; posts %d, retries %d, answers %v", st, sk.Posts, sk.Retries, sk.ByStatus)
			if st.Changes != len(ids) {
				t.Errorf("changes = %d, want %d", st.Changes, len(ids))
			}
			if sk.ByStatus[0] == 0 || sk.ByStatus[http.StatusInternalServerError] == 0 || sk.Retries == 0 {
				t.Errorf("answers %v, retries %d: want client timeouts and 500s, retried", sk.ByStatus, sk.Retries)
			}
			if st.Duplicates == 0 || st.Replayed == 0 {
				t.Errorf("duplicates %d, replayed %d: want both", st.Duplicates, st.Replayed)
			}
			if tt.retryMax > 0 && st.Restarts == 0 {
				t.Error("no restart, although some batches fail on both posts Retry.Max 1 allows")
			}
			if st.MaxBatch > 8 {
				t.Errorf("largest batch %d, over 8", st.MaxBatch)
			}
		})
	}
}

// conflictingDB answers the first reads with a transaction conflict (SQLSTATE 40001),
// as PostgreSQL's SSI may under SERIALIZABLE.
type conflictingDB struct {
	database.DB
	left atomic.Int32
}

func (d *conflictingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if d.left.Add(-1) >= 0 {
		return nil, &pgconn.PgError{Code: "40001", Message: "could not serialize access due to read/write dependencies among transactions"}
	}
	return d.DB.Query(ctx, sql, args...)
}

// A conflict on the feed's read of the journal is the emulation's, never the sink's: a
// changefeed reads through rangefeeds. In CI's profile run the feed stopped on the first
// one ("reading journal rows: … SQLSTATE 40001") and TestChangefeedOnlyPush waited in vain.
func TestFeedRetriesConflictingReads(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ids := pt.Ingest(t, db.Pool, pt.Payload(pt.Spec{}), pt.Payload(pt.Spec{}))
	var mu sync.Mutex
	delivered := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Payload []struct {
				After struct {
					ID string `json:"id"`
				} `json:"after"`
			} `json:"payload"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		for _, p := range body.Payload {
			delivered[p.After.ID] = true
		}
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	cdb := &conflictingDB{DB: db.Pool}
	cdb.left.Store(5)
	feed := &sinktest.Feed{DB: cdb, Sink: &sinktest.Sink{URLs: []string{srv.URL}, Client: srv.Client()},
		FlushMessages: 8, FlushFrequency: 20 * time.Millisecond, Resolved: 100 * time.Millisecond, Seed: 7}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- feed.Run(ctx) }()
	testenv.Eventually(t, 30*time.Second, "both rows delivered, or the feed stopped", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the feed stopped: %v", err)
		default:
		}
		mu.Lock()
		defer mu.Unlock()
		return delivered[ids[0]] && delivered[ids[1]]
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil once its context is cancelled", err)
	}
}
