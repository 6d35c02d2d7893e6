package sinktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
)

// Feed emulates a CockroachDB changefeed on the journal, of the form "inboxd changefeed
// create" makes (AS SELECT * FROM journal WHERE event_op() != 'delete'), delivered by the
// webhook sink. It is the only push: it reads the journal itself, as the rangefeed
// would, and posts what changed. It has the sink's documented semantics, each taken from
// CockroachDB's source (pkg/ccl/changefeedccl) or docs (changefeed-sinks,
// changefeed-messages):
//
//   - At-least-once, with duplicates and replays in any order. Duplicates come from
//     retries, restarts, pause/resume and backfills (docs: changefeed-messages,
//     "Duplicate messages"); Duplicates and Replays inject them. A batch whose retries run
//     out (finite Retry.Max) fails the sink, the job restarts from its last checkpoint
//     (every sink error is marked retryable: errorWrapperSink in sink.go), and everything
//     emitted since the last resolved timestamp is emitted again.
//   - Batches: a batch is flushed when it holds FlushMessages rows, or FlushFrequency
//     after its first row (batching_sink.go, runBatchingWorker; sink_webhook_v2.go,
//     shouldFlush). The body is {"payload":[...],"length":N} (webhookJsonEvent).
//   - Retries: any answer outside 200-299 is an error (sink_webhook_v2.go, Flush), and so
//     is the client's timeout (makeWebhookClient: http.Client{Timeout:
//     webhook_client_timeout}, here Sink.Client.Timeout). Each is retried after a backoff
//     that starts at Backoff and doubles up to MaxBackoff, 30s in CockroachDB, with
//     jitter; Retry.Max times, or forever (parallel_io.go, emitWithRetries; sink.go,
//     getSinkConfigFromJson).
//   - Parallel posts: up to Workers batches in flight (the sink's I/O workers), never two
//     that share a key: a batch waits until the in-flight ones holding its keys are done
//     (parallel_io.go, processIO).
//   - Resolved messages: every Resolved, the sink flushes its batches and waits until
//     every one was answered 2xx, then posts {"resolved":"<HLC>"}, unwrapped, retried
//     the same way (batching_sink.go, EmitResolvedTimestamp).
//
// Rows are rendered as the CDC query emits them: {"after":{...row...},"updated":"<HLC>"},
// without key or topic (docs: cdc-queries).
type Feed struct {
	// DB is the journal the feed watches.
	DB database.DB
	// Sink posts the batches: its URLs, Client (whose Timeout is webhook_client_timeout)
	// and AuthHeader; its Stats count every post.
	Sink *Sink
	// FlushMessages and FlushFrequency are webhook_sink_config's Flush. Defaults 100 and
	// 200ms, as "inboxd changefeed create" sets them.
	FlushMessages  int
	FlushFrequency time.Duration
	// RetryMax is Retry.Max; 0 retries forever ("inf", as changefeed create sets it).
	RetryMax int
	// Backoff is Retry.Backoff (default 500ms); MaxBackoff caps it (default 30s).
	Backoff, MaxBackoff time.Duration
	// Workers is the number of batches in flight at once. Default 4.
	Workers int
	// Resolved is the interval of resolved messages; 0 sends none.
	Resolved time.Duration
	// Poll is how often the journal is read. Default 20ms.
	Poll time.Duration
	// Duplicates is the probability that a row is emitted once more, later, in another
	// batch; Replays that a batch answered 2xx is emitted again, whole, later. With
	// Replays > 0 the first batch answered 2xx is always replayed, so that a short run
	// shows one whatever the timing (which decides how the seeded draws fall).
	Duplicates, Replays float64
	// Seed seeds the faults and the jitter.
	Seed uint64

	mu    sync.Mutex
	stats FeedStats
}

// FeedStats counts what the feed did; Sink.Stats counts the posts.
type FeedStats struct {
	Emitted      int // row messages put into batches, duplicates and replays included
	Changes      int // journal row versions seen for the first time
	Duplicates   int // rows emitted again by Duplicates
	Replayed     int // rows emitted again by Replays and restarts
	Restarts     int // job restarts after a batch ran out of retries
	Batches      int // batches answered 2xx
	Delivered    int // rows in batches answered 2xx
	MaxBatch     int // largest batch posted
	Resolved     int // resolved messages answered 2xx
	LastResolved webhook.HLC
}

// Stats returns a snapshot.
func (f *Feed) Stats() FeedStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *Feed) count(fn func(s *FeedStats)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.stats)
}

type feedRow struct {
	id   string
	body json.RawMessage
}

type feedBatch struct {
	rows []feedRow
	keys map[string]bool
}

type feedResult struct {
	b   *feedBatch
	err error
}

// errRetriesExhausted is a batch that got no 2xx within Retry.Max retries.
var errRetriesExhausted = errors.New("sink retries exhausted")

// Run feeds the webhook until ctx ends, then returns nil; or the journal's error.
func (f *Feed) Run(ctx context.Context) error {
	msgs, freq := f.FlushMessages, f.FlushFrequency
	if msgs <= 0 {
		msgs = 100
	}
	if freq <= 0 {
		freq = 200 * time.Millisecond
	}
	workers := f.Workers
	if workers <= 0 {
		workers = 4
	}
	poll := f.Poll
	if poll <= 0 {
		poll = 20 * time.Millisecond
	}
	rng := rand.New(rand.NewPCG(f.Seed, f.Seed^0x9e3779b97f4a7c15))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	work := make(chan *feedBatch)
	results := make(chan feedResult)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range workers {
		wg.Add(1)
		jitter := rand.New(rand.NewPCG(f.Seed+uint64(i)+1, 1))
		go func() {
			defer wg.Done()
			for b := range work {
				err := f.deliver(ctx, f.body(b.rows), jitter)
				select {
				case results <- feedResult{b, err}:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	defer close(work)

	// The changefeed watches the journal table: its rows carry the journal's columns
	// only, whatever else journal.RowsAsJSON joins to them (the entry's state).
	var columns map[string]bool
	if err := testenv.Observe(ctx, f.DB, func(q pgx.Tx) (err error) {
		columns, err = tableColumns(ctx, q, "journal")
		return err
	}); err != nil {
		return err
	}
	clock := &Clock{}
	seen := map[string]string{} // id → the version emitted, as the feed renders it
	var (
		buf             []feedRow
		flushAt         time.Time
		later           []feedRow // duplicates and replays, emitted at the next poll
		sinceCheckpoint []feedRow // changes seen since the last resolved message
		pending         []*feedBatch
		inflight        = map[string]int{} // key → batches in flight holding it
		busy            int
		lastPoll        webhook.HLC
		resolvedDue     bool
	)
	emit := func(r feedRow) {
		buf = append(buf, r)
		f.count(func(s *FeedStats) { s.Emitted++ })
		if len(buf) == 1 {
			flushAt = time.Now().Add(freq)
		}
		if len(buf) >= msgs {
			b := &feedBatch{rows: buf, keys: map[string]bool{}}
			for _, r := range buf {
				b.keys[r.id] = true
			}
			pending, buf = append(pending, b), nil
		}
	}
	flush := func() {
		if len(buf) > 0 {
			b := &feedBatch{rows: buf, keys: map[string]bool{}}
			for _, r := range buf {
				b.keys[r.id] = true
			}
			pending, buf = append(pending, b), nil
		}
	}
	// dispatch sends the pending batches that share no key with one in flight, nor with
	// an earlier pending one, while workers are free.
	dispatch := func() {
		held := map[string]bool{}
		for i := 0; i < len(pending) && busy < workers; {
			b := pending[i]
			conflict := false
			for k := range b.keys {
				if inflight[k] > 0 || held[k] {
					conflict = true
					break
				}
			}
			if conflict {
				for k := range b.keys {
					held[k] = true
				}
				i++
				continue
			}
			select {
			case work <- b:
			case <-ctx.Done():
				return
			}
			busy++
			for k := range b.keys {
				inflight[k]++
			}
			f.count(func(s *FeedStats) { s.MaxBatch = max(s.MaxBatch, len(b.rows)) })
			pending = append(pending[:i], pending[i+1:]...)
		}
	}
	readJournal := func() error {
		// A changefeed reads through rangefeeds, outside any transaction: it never
		// conflicts with the transactions it watches, nor they with it. So the read
		// takes no part in the profile's SERIALIZABLE (testenv.Observe).
		var rows []json.RawMessage
		err := testenv.Observe(ctx, f.DB, func(q pgx.Tx) (err error) {
			rows, err = journal.RowsAsJSON(ctx, q, nil)
			return err
		})
		if err != nil {
			return err
		}
		lastPoll = clock.Now()
		for _, full := range rows {
			var r struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(full, &r); err != nil {
				return fmt.Errorf("journal row %s: %w", full, err)
			}
			raw, err := onlyColumns(full, columns)
			if err != nil {
				return fmt.Errorf("journal row %s: %w", full, err)
			}
			// The CDC query's WHERE keeps every version but deletes, and a delete is not
			// a row here: each version of a row (its insert by ingest, an operator's
			// edit) is emitted once. Processing writes journal_state, which the feed
			// does not watch.
			if seen[r.ID] == string(raw) {
				continue
			}
			seen[r.ID] = string(raw)
			body, _ := json.Marshal(struct {
				After   json.RawMessage `json:"after"`
				Updated string          `json:"updated"`
			}{raw, clock.Now().String()})
			row := feedRow{id: r.ID, body: body}
			f.count(func(s *FeedStats) { s.Changes++ })
			sinceCheckpoint = append(sinceCheckpoint, row)
			emit(row)
			if rng.Float64() < f.Duplicates {
				later = append(later, row)
				f.count(func(s *FeedStats) { s.Duplicates++ })
			}
		}
		return nil
	}

	pollT := time.NewTicker(poll)
	defer pollT.Stop()
	var resolvedC <-chan time.Time
	if f.Resolved > 0 {
		rt := time.NewTicker(f.Resolved)
		defer rt.Stop()
		resolvedC = rt.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-pollT.C:
			// Duplicates and replays of earlier polls, shuffled: any order.
			rng.Shuffle(len(later), func(i, j int) { later[i], later[j] = later[j], later[i] })
			for _, r := range later {
				emit(r)
			}
			later = nil
			if err := readJournal(); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if len(buf) > 0 && !time.Now().Before(flushAt) {
				flush()
			}
		case <-resolvedC:
			resolvedDue = true
		case res := <-results:
			busy--
			for k := range res.b.keys {
				if inflight[k]--; inflight[k] == 0 {
					delete(inflight, k)
				}
			}
			switch {
			case res.err == nil:
				first := false
				f.count(func(s *FeedStats) { first = s.Batches == 0; s.Batches++; s.Delivered += len(res.b.rows) })
				if f.Replays > 0 && (first || rng.Float64() < f.Replays) {
					later = append(later, res.b.rows...)
					f.count(func(s *FeedStats) { s.Replayed += len(res.b.rows) })
				}
			case errors.Is(res.err, errRetriesExhausted):
				// The job restarts from its checkpoint: what it had buffered is dropped, and
				// every change since the checkpoint is emitted again (this batch's among
				// them: nothing after a checkpoint was answered 2xx when it was taken).
				buf, pending = nil, nil
				later = append(later[:0], sinceCheckpoint...)
				f.count(func(s *FeedStats) { s.Restarts++; s.Replayed += len(sinceCheckpoint) })
			default: // deliver ends only with ctx
				return nil
			}
		}
		if resolvedDue {
			flush()
		}
		dispatch()
		if resolvedDue && busy == 0 && len(pending) == 0 && len(later) == 0 {
			// Every row seen up to the last poll was answered 2xx.
			ts := lastPoll
			body, _ := json.Marshal(webhook.ResolvedMessage{Resolved: ts.String()})
			err := f.deliver(ctx, body, rng)
			switch {
			case err == nil:
				f.count(func(s *FeedStats) { s.Resolved++; s.LastResolved = ts })
				sinceCheckpoint = nil
			case errors.Is(err, errRetriesExhausted):
				f.count(func(s *FeedStats) { s.Restarts++ })
			default:
				return nil
			}
			resolvedDue = false
		}
	}
}

func (f *Feed) body(rows []feedRow) []byte {
	payload := make([]json.RawMessage, len(rows))
	for i, r := range rows {
		payload[i] = r.body
	}
	b, _ := json.Marshal(webhook.Batch{Payload: payload, Length: len(payload)})
	return b
}

// deliver posts body until it is answered 2xx, RetryMax retries (0: forever), backing
// off between tries.
func (f *Feed) deliver(ctx context.Context, body []byte, rng *rand.Rand) error {
	backoff, maxBackoff := f.Backoff, f.MaxBackoff
	if backoff <= 0 {
		backoff = 500 * time.Millisecond
	}
	if maxBackoff <= 0 {
		maxBackoff = 30 * time.Second
	}
	s := f.Sink
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if f.RetryMax > 0 && attempt > f.RetryMax {
				return errRetriesExhausted
			}
			s.retries.Add(1)
			// CockroachDB's retry.Options jitter: ±15% (RandomizationFactor).
			d := time.Duration(float64(backoff) * (0.85 + 0.3*rng.Float64()))
			t := time.NewTimer(d) // the sink's backoff: a behaviour, not a wait for an outcome
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
			backoff = min(backoff*2, maxBackoff)
		}
		url := s.URLs[s.next.Add(1)%uint64(len(s.URLs))]
		status, _, err := s.Post(ctx, url, body)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil && status >= http.StatusOK && status < http.StatusMultipleChoices {
			return nil
		}
	}
}

// tableColumns returns the names of table's columns in the current schema.
func tableColumns(ctx context.Context, q pgx.Tx, table string) (map[string]bool, error) {
	rows, err := q.Query(ctx, `SELECT column_name::TEXT FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1`, table)
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the columns of %s: %w", table, err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// onlyColumns keeps the members of the JSON object row that are columns.
func onlyColumns(row json.RawMessage, columns map[string]bool) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(row, &m); err != nil {
		return nil, err
	}
	for k := range m {
		if !columns[k] {
			delete(m, k)
		}
	}
	return json.Marshal(m)
}
