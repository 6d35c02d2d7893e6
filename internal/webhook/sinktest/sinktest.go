// Package sinktest is a test client that behaves like CockroachDB's webhook sink: it
// POSTs wrapped batches of rows ({"payload":[...],"length":N}), several in flight at
// once, sends resolved messages unwrapped, and retries every non-2xx answer or
// transport error with exponential backoff until it gets a 2xx or its context ends.
//
// Rows are built from real journal rows: after = the row as JSON, key = [id],
// updated = an HLC string from a monotonic clock.
package sinktest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/testenv"
	"github.com/inboxd/inboxd/internal/webhook"
)

// Clock hands out strictly increasing HLC timestamps near the wall clock.
type Clock struct {
	mu   sync.Mutex
	last webhook.HLC
}

// Now returns the next timestamp.
func (c *Clock) Now() webhook.HLC {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := webhook.HLC{WallTime: time.Now().UnixNano()}
	if !c.last.Less(next) {
		next = webhook.HLC{WallTime: c.last.WallTime, Logical: c.last.Logical + 1}
	}
	c.last = next
	return next
}

// Wrapped renders one row message in the wrapped envelope.
func Wrapped(after json.RawMessage, id, topic string, updated webhook.HLC) json.RawMessage {
	key, _ := json.Marshal([]string{id})
	b, _ := json.Marshal(webhook.WrappedRow{After: after, Key: key, Topic: topic, Updated: updated.String()})
	return b
}

// Bare renders one row message in the bare envelope (CDC queries): the row's columns
// at top level plus "__crdb__".
func Bare(after json.RawMessage, id, topic string, updated webhook.HLC) json.RawMessage {
	var cols map[string]json.RawMessage
	if err := json.Unmarshal(after, &cols); err != nil || cols == nil {
		cols = map[string]json.RawMessage{}
	}
	key, _ := json.Marshal([]string{id})
	meta, _ := json.Marshal(webhook.CRDBMeta{Key: key, Topic: topic, Updated: updated.String()})
	cols["__crdb__"] = meta
	b, _ := json.Marshal(cols)
	return b
}

// FromJournal renders the journal rows (all of them when ids is nil) as wrapped row
// messages, with fresh updated timestamps from clock. As in Feed, the read takes no part
// in the profile's SERIALIZABLE (testenv.Observe).
func FromJournal(ctx context.Context, db database.DB, ids []string, clock *Clock) ([]json.RawMessage, error) {
	var rows []json.RawMessage
	err := testenv.Observe(ctx, db, func(q pgx.Tx) (err error) {
		rows, err = journal.RowsAsJSON(ctx, q, ids)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, len(rows))
	for i, r := range rows {
		var id struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(r, &id); err != nil {
			return nil, fmt.Errorf("journal row %s: %w", r, err)
		}
		out[i] = Wrapped(r, id.ID, "journal", clock.Now())
	}
	return out, nil
}

// Sink posts to one or more webhook URLs (round robin, as behind a load balancer).
type Sink struct {
	URLs       []string
	Client     *http.Client
	AuthHeader string
	// InFlight is the number of concurrent POSTs. Default 4.
	InFlight int
	// MinBackoff and MaxBackoff bound the retry delay, which doubles per retry.
	// Defaults 5ms and 100ms.
	MinBackoff, MaxBackoff time.Duration

	next    atomic.Uint64
	posts   atomic.Int64
	retries atomic.Int64
	rows    atomic.Int64

	mu       sync.Mutex
	byStatus map[int]int
}

// Stats counts what the sink did.
type Stats struct {
	Posts    int64       // HTTP requests, retries included
	Retries  int64       // requests repeated after a non-2xx answer or a transport error
	Rows     int64       // row messages in batches answered 2xx
	ByStatus map[int]int // answers by status code; 0 for transport errors
}

// Stats returns a snapshot.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	by := make(map[int]int, len(s.byStatus))
	for k, v := range s.byStatus {
		by[k] = v
	}
	return Stats{Posts: s.posts.Load(), Retries: s.retries.Load(), Rows: s.rows.Load(), ByStatus: by}
}

// Send delivers rows in batches of at most batchSize, InFlight batches at a time,
// each retried until answered 2xx. It returns when every batch got a 2xx, or with
// the context's error.
func (s *Sink) Send(ctx context.Context, rows []json.RawMessage, batchSize int) error {
	if batchSize <= 0 {
		batchSize = 100
	}
	var batches [][]json.RawMessage
	for len(rows) > 0 {
		n := min(batchSize, len(rows))
		batches = append(batches, rows[:n])
		rows = rows[n:]
	}
	inFlight := s.InFlight
	if inFlight <= 0 {
		inFlight = 4
	}
	work := make(chan []json.RawMessage)
	errs := make(chan error, inFlight)
	var wg sync.WaitGroup
	for range min(inFlight, len(batches)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := range work {
				if err := s.PostBatch(ctx, b); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, b := range batches {
		select {
		case work <- b:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// PostBatch delivers one wrapped batch, retrying until 2xx.
func (s *Sink) PostBatch(ctx context.Context, rows []json.RawMessage) error {
	body, err := json.Marshal(webhook.Batch{Payload: rows, Length: len(rows)})
	if err != nil {
		return err
	}
	if err := s.deliver(ctx, body); err != nil {
		return err
	}
	s.rows.Add(int64(len(rows)))
	return nil
}

// Resolved delivers a resolved message, retrying until 2xx.
func (s *Sink) Resolved(ctx context.Context, ts webhook.HLC) error {
	body, _ := json.Marshal(webhook.ResolvedMessage{Resolved: ts.String()})
	return s.deliver(ctx, body)
}

func (s *Sink) deliver(ctx context.Context, body []byte) error {
	backoff := s.MinBackoff
	if backoff <= 0 {
		backoff = 5 * time.Millisecond
	}
	maxBackoff := s.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 100 * time.Millisecond
	}
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.retries.Add(1)
			// Jittered backoff, as the sink's retry does: a behaviour, not a wait for an outcome.
			t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
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
		if err == nil && status >= 200 && status < 300 {
			return nil
		}
	}
}

// Post sends one request without retrying and returns the status and body.
func (s *Sink) Post(ctx context.Context, url string, body []byte) (int, []byte, error) {
	s.posts.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.AuthHeader != "" {
		req.Header.Set("Authorization", s.AuthHeader)
	}
	resp, err := s.Client.Do(req)
	if err != nil {
		s.count(0)
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	s.count(resp.StatusCode)
	return resp.StatusCode, b, err
}

func (s *Sink) count(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byStatus == nil {
		s.byStatus = map[int]int{}
	}
	s.byStatus[status]++
}
