package webhook

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/httpsec"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/logx"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
)

// Processor processes the pending journal entries a batch names; *process.Engine is
// one. It returns an error only when some outcome could not be recorded.
type Processor interface {
	ProcessBatch(ctx context.Context, items []process.Item) ([]process.Outcome, error)
}

// DefaultMaxBodyBytes bounds a request body: derived from the Flush.Bytes that
// "inboxd changefeed create" sets and from message.DefaultMaxBodyBytes (feed.WebhookBodyCap),
// so that the sink never builds a batch this handler refuses. MaxBodyBytes(n) gives the
// cap for another message size.
var DefaultMaxBodyBytes = MaxBodyBytes(message.DefaultMaxBodyBytes)

// MaxBodyBytes is the body cap for messages of at most maxMessageBytes.
func MaxBodyBytes(maxMessageBytes int) int64 {
	return feed.WebhookBodyCap(feed.DefaultOptions("", "", "").Flush, maxMessageBytes)
}

// Config configures the handler.
type Config struct {
	// AuthHeader is the exact Authorization header the changefeed sends, i.e. its
	// webhook_auth_header option ("Bearer <token>"). Empty disables the check.
	AuthHeader string
	// MaxBodyBytes bounds a request body; larger ones get 413. Default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Sink names this feed's row in feed_watermark. Default "default".
	Sink string
	// MaxResolvedAhead bounds how far past this machine's clock a resolved timestamp may
	// lie; a later one is ignored and counted, never stored. Default DefaultMaxResolvedAhead.
	MaxResolvedAhead time.Duration
	// MaxPendingRows bounds the pending rows of one batch that the handler processes
	// itself; the rest are counted as over_limit, answered 2xx like poison rows and left
	// to the sweeper. Default DefaultMaxPendingRows.
	MaxPendingRows int
	// ProcessTimeout bounds the processing of one batch. It runs detached from the
	// request, so that the sink giving up (webhook_client_timeout) does not roll it back;
	// see Handler. Keep it above the engine's HandlerTimeout. Default DefaultProcessTimeout.
	ProcessTimeout time.Duration
	// MaxBatchesInFlight bounds the batches being processed at once; a post that would
	// start one more is answered 503, and the sink retries it. Default
	// DefaultMaxBatchesInFlight.
	MaxBatchesInFlight int
}

// DefaultProcessTimeout: ten times the engine's default HandlerTimeout (30s). A batch
// the feed flushes (feed.DefaultFlushMessages rows) runs its events in a few
// transactions, in sequence within each, so this lets a batch finish even when some
// handlers run close to their own timeout. Past it, the batch's open transaction is
// rolled back (committed ones stay) and the sink's next retry starts the rest again.
const DefaultProcessTimeout = defaults.WebhookProcessTimeout

// DefaultMaxBatchesInFlight: CockroachDB's webhook sink posts at most one batch per I/O
// worker (changefeed.sink_io_workers, by default GOMAXPROCS capped at 32) on each node
// that runs a part of the feed; see numSinkIOWorkers in pkg/ccl/changefeedccl/sink.go.
// Each batch in flight keeps up to MaxPendingRows items in memory.
const DefaultMaxBatchesInFlight = defaults.WebhookBatchesInFlight

// DefaultMaxPendingRows: a feed made by "inboxd changefeed create" flushes batches of
// at most feed.DefaultFlushMessages rows, so this leaves room for feeds flushing a
// hundred times more. Without a bound, one body at the cap made of minimal rows ({"after":
// {"id":"<uuid>"}}, 50 bytes) names 190,000 entries, which the handler and the engine
// would each keep in memory at once. Over the bound, refusing the batch is no answer:
// the sink retries every non-2xx answer forever
// (https://www.cockroachlabs.com/docs/stable/changefeed-sinks#webhook-sink), so the rows
// over it go to the sweeper, which takes RECEIVED entries older than its grace period.
const DefaultMaxPendingRows = 100 * feed.DefaultFlushMessages

// DefaultMaxResolvedAhead: a resolved timestamp is a closed timestamp, which trails the
// cluster's clock; CockroachDB nodes run within --max-offset (500ms by default) of each
// other. Ten minutes covers any skew between inboxd and the cluster that a working
// deployment has, and is short enough that a forged "year 2262" never sticks.
const DefaultMaxResolvedAhead = defaults.WebhookResolvedAhead

// Handler receives the changefeed's webhook POSTs.
//
// It answers 2xx once every row's outcome is durably recorded (processed, rejected,
// failed with its retry scheduled, deferred behind an earlier event of its aggregate)
// or the row is not work at all; 5xx only when an outcome could not be recorded, so
// that the sink redelivers (redelivery of what was recorded is a no-op). A single
// unusable row never fails its batch: the sink retries non-2xx answers forever, so one
// poison row answered with 4xx would block the feed. Such a row is logged and counted,
// its journal entry stays RECEIVED, and the sweeper processes it from the database.
//
// Not feeding on itself: processing writes the entry's state to journal_state, never to
// the journal row the feed watches, so outcomes are no changes of the journal; a row is
// emitted when it is journaled, and again only after an operator's edit (which retried
// the entry). The feed is meant to be a CDC query (CREATE CHANGEFEED ... AS SELECT ...
// FROM journal WHERE event_op() != 'delete'), which drops the retention pruner's
// deletes inside CockroachDB. A plain CREATE CHANGEFEED FOR TABLE journal delivers
// them, so the handler filters too, without touching the database: deletes (after =
// null) are counted as ignored, and so are rows that carry a status (a journal from
// before v0.3.0, or a CDC query that projects one) that is terminal, or FAILED with its
// next attempt still in the future (the sweeper retries those when due). What remains
// costs one short transaction per row, which finds nothing to do for a replay or a
// settled entry.
//
// Outliving the request: the sink's HTTP client gives up after webhook_client_timeout
// and posts the same batch again, forever (pkg/ccl/changefeedccl/sink_webhook_v2.go,
// makeWebhookClient; parallel_io.go, emitWithRetries). Processing under the request's
// context rolled back every try of a batch slower than that timeout, ran its handlers
// again each time, and blocked the feed. So a batch is processed under the handler's own
// deadline (Config.ProcessTimeout), detached from the request and ended early only by
// Shutdown; the request waits for it as long as it lasts. A retry of a batch still in
// flight in this process joins it: it waits for the same outcome instead of running the
// handlers again. A retry that comes after it finds the rows recorded (a no-op), and one
// that reaches another instance waits for the row locks and finds the same.
//
// Memory: the body is decoded as it is read and only the pending items are kept, at
// most Config.MaxPendingRows of them (the rest, counted as over_limit, go to the
// sweeper), so a body at the cap made of millions of tiny rows costs no more than a
// realistic batch.
type Handler struct {
	cfg  Config
	proc Processor
	db   database.DB
	m    *metrics.Metrics
	log  *slog.Logger
	auth httpsec.Secret

	mu     sync.Mutex
	latest HLC

	inflight *inflight // batches being processed, by event id

	warn *logx.Limiter // repeated warnings: one line per kind per minute
}

// New builds the handler. db stores the watermark; m and log may be nil.
func New(cfg Config, proc Processor, db database.DB, m *metrics.Metrics, log *slog.Logger) *Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Sink == "" {
		cfg.Sink = "default"
	}
	if cfg.MaxResolvedAhead <= 0 {
		cfg.MaxResolvedAhead = DefaultMaxResolvedAhead
	}
	if cfg.MaxPendingRows <= 0 {
		cfg.MaxPendingRows = DefaultMaxPendingRows
	}
	if cfg.ProcessTimeout <= 0 {
		cfg.ProcessTimeout = DefaultProcessTimeout
	}
	if cfg.MaxBatchesInFlight <= 0 {
		cfg.MaxBatchesInFlight = DefaultMaxBatchesInFlight
	}
	if m == nil {
		m = metrics.New()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.AuthHeader == "" {
		log.Warn("the webhook accepts requests without credentials: Config.AuthHeader is empty")
	}
	return &Handler{cfg: cfg, proc: proc, db: db, m: m, log: log, auth: httpsec.NewSecret(cfg.AuthHeader),
		warn: logx.NewLimiter(time.Minute), inflight: newInflight()}
}

// Register mounts the handler on e as POST path.
func (h *Handler) Register(e *echo.Echo, path string) { e.POST(path, h.Handle) }

// Resolved returns the latest resolved timestamp this handler stored (zero if none
// yet); ReadWatermark gives the one shared by every instance.
func (h *Handler) Resolved() HLC {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest
}

type errorBody struct {
	Error string `json:"error"`
}

// Handle is the echo.HandlerFunc.
func (h *Handler) Handle(c echo.Context) error {
	req := c.Request()
	if !h.authorized(req.Header.Get(echo.HeaderAuthorization)) {
		h.m.WebhookBatches.WithLabelValues("unauthorized").Inc()
		return c.JSON(http.StatusUnauthorized, errorBody{"missing or wrong Authorization header"})
	}
	if req.ContentLength > h.cfg.MaxBodyBytes {
		h.m.WebhookBatches.WithLabelValues("too_large").Inc()
		return c.JSON(http.StatusRequestEntityTooLarge, errorBody{"body exceeds the size limit"})
	}
	// Decoded as it is read, row by row: read whole with every row decoded before any
	// was looked at, a body at the cap of {} rows allocated 1.5 GB.
	body := &countingReader{r: http.MaxBytesReader(c.Response(), req.Body, h.cfg.MaxBodyBytes)}
	b := h.newBatch()
	resolved, err := decodeStream(body, b.add, &rowDecoder{brief: true})
	if err != nil {
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			h.m.WebhookBatches.WithLabelValues("too_large").Inc()
			return c.JSON(http.StatusRequestEntityTooLarge, errorBody{"body exceeds the size limit"})
		case !errors.Is(err, ErrMalformed):
			h.m.WebhookBatches.WithLabelValues("bad_request").Inc()
			return c.JSON(http.StatusBadRequest, errorBody{err.Error()})
		}
		h.m.WebhookBatches.WithLabelValues("bad_request").Inc()
		if ok, dropped := h.warn.Allow("malformed"); ok {
			h.log.Warn("malformed webhook body", "error", err, "bytes_read", body.n, "similar_not_logged", dropped)
		}
		return c.JSON(http.StatusBadRequest, errorBody{err.Error()})
	}
	ctx := req.Context()
	if !resolved.IsZero() && resolved.Time().After(time.Now().Add(h.cfg.MaxResolvedAhead)) {
		// Stored, it would stay for good (the watermark only moves forward); refused
		// with a 4xx, the sink would retry it forever and block the feed.
		h.m.WebhookBatches.WithLabelValues("resolved_ignored").Inc()
		if ok, dropped := h.warn.Allow("resolved"); ok {
			h.log.Warn("ignored a resolved timestamp implausibly far in the future", "resolved", resolved.String(),
				"max_ahead", h.cfg.MaxResolvedAhead, "similar_not_logged", dropped)
		}
		return c.JSON(http.StatusOK, map[string]string{"ignored": "resolved timestamp too far in the future"})
	}
	if !resolved.IsZero() {
		if err := h.resolved(ctx, resolved); err != nil {
			return h.failed(c, err)
		}
		h.m.WebhookBatches.WithLabelValues("ok").Inc()
		return c.JSON(http.StatusOK, map[string]string{"resolved": resolved.String()})
	}
	counts, err := h.process(ctx, b)
	if err != nil {
		return h.failed(c, err)
	}
	h.m.WebhookBatches.WithLabelValues("ok").Inc()
	return c.JSON(http.StatusOK, counts)
}

// authorized compares hashes in constant time (httpsec.Secret), so that neither the
// token's bytes nor its length leak through timing.
func (h *Handler) authorized(got string) bool {
	if h.cfg.AuthHeader == "" {
		return true
	}
	return h.auth.Matches(got)
}

func (h *Handler) failed(c echo.Context, err error) error {
	h.m.WebhookBatches.WithLabelValues("error").Inc()
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, errProcessTimeout):
		// The sink gave up (its client timeout) or went away; the batch goes on.
		h.log.Info("webhook request ended before its batch; the sink will redeliver", "error", err)
	case errors.Is(err, ErrShuttingDown):
		h.log.Info("webhook batch refused: shutting down; the sink will redeliver")
	case errors.Is(err, errTooManyBatches):
		if ok, dropped := h.warn.Allow("too_many"); ok {
			h.log.Warn("webhook batch refused: Config.MaxBatchesInFlight reached; the sink will redeliver",
				"max", h.cfg.MaxBatchesInFlight, "similar_not_logged", dropped)
		}
	case journal.IsUnavailable(err):
		// A database outage: transient, and the sink redelivers; logged at most once a
		// warn interval, not once per batch.
		if ok, dropped := h.warn.Allow("unavailable"); ok {
			h.log.Warn("webhook batch not recorded: the database is unavailable; the sink will redeliver",
				"error", err, "similar_not_logged", dropped)
		}
	default:
		h.log.Error("webhook batch not recorded; the sink will redeliver", "error", err)
	}
	// The cause stays in the log: database errors name hosts, tables and constraints.
	return c.JSON(http.StatusServiceUnavailable, errorBody{"outcome not recorded, retry"})
}

// countingReader counts the bytes read, for the log.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// batch is what the handler keeps of a batch while it is read: the pending items,
// counts by disposition and the first poison row's error, nothing per row that is not
// work.
type batch struct {
	now        time.Time
	maxPending int
	rows       int
	poison     int
	ignored    int
	overLimit  int
	items      []process.Item
	seen       map[string]struct{}
	firstErr   error
}

func (h *Handler) newBatch() *batch {
	return &batch{now: time.Now(), maxPending: h.cfg.MaxPendingRows, seen: map[string]struct{}{}}
}

// add files one row: it filters the batch down to pending work.
func (b *batch) add(r Row) {
	b.rows++
	switch {
	case r.Err != nil:
		b.poison++
		if b.firstErr == nil {
			b.firstErr = r.Err
		}
	case r.Deleted, !r.Journal.pending():
		b.ignored++
	case r.Journal.Status == journal.StatusFailed && r.Journal.NextAttemptAt.After(b.now):
		b.ignored++ // its own failure, coming back through the feed
	default:
		if _, dup := b.seen[r.Journal.ID]; dup {
			b.ignored++ // one batch can hold several versions of a row
			return
		}
		if len(b.items) >= b.maxPending {
			b.overLimit++
			return
		}
		b.seen[r.Journal.ID] = struct{}{}
		b.items = append(b.items, process.Item{ID: r.Journal.ID, AggregateID: r.Journal.AggregateID, SequenceNo: r.Journal.SequenceNo})
	}
}

// process processes the batch's pending items, or joins the batches in flight that
// already process them, and waits for the outcome as long as the request lasts. It
// returns counts by disposition: the outcomes of the items it processed, and "joined"
// for those another post's batch processed (their outcomes are counted once, by it).
func (h *Handler) process(ctx context.Context, b *batch) (map[string]int, error) {
	counts := map[string]int{}
	for k, n := range map[string]int{"poison": b.poison, "ignored": b.ignored, "over_limit": b.overLimit} {
		if n > 0 {
			counts[k] = n
			h.m.WebhookRows.WithLabelValues(k).Add(float64(n))
		}
	}
	var err error
	if len(b.items) > 0 {
		err = h.await(ctx, b.items, counts)
	}
	// One line per batch, whatever its size: a batch of a million bad rows must not
	// write a million lines. Batches with unusable rows warn, at most once a minute.
	if b.firstErr != nil {
		if ok, dropped := h.warn.Allow("poison"); ok {
			h.log.Warn("unusable changefeed rows skipped; their journal entries are left to the sweeper",
				"rows", b.rows, "poison", b.poison, "first_error", b.firstErr, "batches_not_logged", dropped)
		}
	}
	if b.overLimit > 0 {
		if ok, dropped := h.warn.Allow("over_limit"); ok {
			h.log.Warn("batch has more pending rows than Config.MaxPendingRows; the rest are left to the sweeper",
				"rows", b.rows, "processed", len(b.items), "over_limit", b.overLimit, "batches_not_logged", dropped)
		}
	}
	if b.firstErr == nil && b.overLimit == 0 {
		h.log.Debug("webhook batch", "rows", b.rows, "counts", counts)
	}
	return counts, err
}

// errProcessTimeout marks a batch that overran Config.ProcessTimeout.
var errProcessTimeout = errors.New("webhook process timeout")

// await starts or joins the processing of items and waits for it; it adds the
// outcomes to counts.
func (h *Handler) await(ctx context.Context, items []process.Item, counts map[string]int) error {
	own, joined, err := h.start(ctx, items)
	if err != nil {
		return err
	}
	jobs := []*job{own}
	seen := map[*job]bool{}
	for _, j := range joined {
		if !seen[j] {
			seen[j] = true
			jobs = append(jobs, j)
		}
	}
	if err := h.inflight.wait(ctx, jobs...); err != nil {
		return err
	}
	if n := len(joined); n > 0 {
		counts["joined"] += n
		h.m.WebhookRows.WithLabelValues("joined").Add(float64(n))
	}
	if own != nil {
		for _, o := range own.outs {
			counts[string(o)]++
		}
	}
	return nil
}

func (h *Handler) resolved(ctx context.Context, ts HLC) error {
	if h.db == nil {
		return errors.New("no database configured for the watermark")
	}
	if err := StoreWatermark(ctx, h.db, h.cfg.Sink, ts); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.latest.Less(ts) {
		h.latest = ts
		h.m.FeedResolved.Set(float64(ts.WallTime) / 1e9)
	}
	h.m.FeedLagSeconds.Set(time.Since(h.latest.Time()).Seconds())
	return nil
}
