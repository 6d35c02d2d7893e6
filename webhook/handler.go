package webhook

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/feed"
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
}

// DefaultMaxResolvedAhead: a resolved timestamp is a closed timestamp, which trails the
// cluster's clock; CockroachDB nodes run within --max-offset (500ms by default) of each
// other. Ten minutes covers any skew between inboxd and the cluster that a working
// deployment has, and is short enough that a forged "year 2262" never sticks.
const DefaultMaxResolvedAhead = 10 * time.Minute

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
// Feeding on itself: processing updates the very journal rows the feed watches, so
// every outcome is itself a change. The feed is meant to be a CDC query
// (CREATE CHANGEFEED ... AS SELECT ... FROM journal WHERE status = 'RECEIVED'), which
// filters inside CockroachDB: PROCESSED/REJECTED/DEAD/FAILED versions never leave the
// database. A plain CREATE CHANGEFEED FOR TABLE journal does deliver them, so the
// handler filters too, without touching the database: deletes (after = null, e.g.
// TTL), terminal statuses, and FAILED rows whose next attempt is still in the future
// (the sweeper retries those when due) are counted as ignored. What remains costs one
// short transaction per row, which finds nothing to do for a replay.
type Handler struct {
	cfg  Config
	proc Processor
	db   journal.DB
	m    *metrics.Metrics
	log  *slog.Logger
	auth [sha256.Size]byte

	mu     sync.Mutex
	latest HLC

	warn *logx.Limiter // repeated warnings: one line per kind per minute
}

// New builds the handler. db stores the watermark; m and log may be nil.
func New(cfg Config, proc Processor, db journal.DB, m *metrics.Metrics, log *slog.Logger) *Handler {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.Sink == "" {
		cfg.Sink = "default"
	}
	if cfg.MaxResolvedAhead <= 0 {
		cfg.MaxResolvedAhead = DefaultMaxResolvedAhead
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
	return &Handler{cfg: cfg, proc: proc, db: db, m: m, log: log, auth: sha256.Sum256([]byte(cfg.AuthHeader)),
		warn: logx.NewLimiter(time.Minute)}
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
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), req.Body, h.cfg.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			h.m.WebhookBatches.WithLabelValues("too_large").Inc()
			return c.JSON(http.StatusRequestEntityTooLarge, errorBody{"body exceeds the size limit"})
		}
		h.m.WebhookBatches.WithLabelValues("bad_request").Inc()
		return c.JSON(http.StatusBadRequest, errorBody{"reading body: " + err.Error()})
	}
	msg, err := Decode(body)
	if err != nil {
		h.m.WebhookBatches.WithLabelValues("bad_request").Inc()
		if ok, dropped := h.warn.Allow("malformed"); ok {
			h.log.Warn("malformed webhook body", "error", err, "bytes", len(body), "similar_not_logged", dropped)
		}
		return c.JSON(http.StatusBadRequest, errorBody{err.Error()})
	}
	ctx := req.Context()
	if !msg.Resolved.IsZero() && msg.Resolved.Time().After(time.Now().Add(h.cfg.MaxResolvedAhead)) {
		// Stored, it would stay for good (the watermark only moves forward); refused
		// with a 4xx, the sink would retry it forever and block the feed.
		h.m.WebhookBatches.WithLabelValues("resolved_ignored").Inc()
		if ok, dropped := h.warn.Allow("resolved"); ok {
			h.log.Warn("ignored a resolved timestamp implausibly far in the future", "resolved", msg.Resolved.String(),
				"max_ahead", h.cfg.MaxResolvedAhead, "similar_not_logged", dropped)
		}
		return c.JSON(http.StatusOK, map[string]string{"ignored": "resolved timestamp too far in the future"})
	}
	if !msg.Resolved.IsZero() {
		if err := h.resolved(ctx, msg.Resolved); err != nil {
			return h.failed(c, err)
		}
		h.m.WebhookBatches.WithLabelValues("ok").Inc()
		return c.JSON(http.StatusOK, map[string]string{"resolved": msg.Resolved.String()})
	}
	counts, err := h.rows(ctx, msg.Rows)
	if err != nil {
		return h.failed(c, err)
	}
	h.m.WebhookBatches.WithLabelValues("ok").Inc()
	return c.JSON(http.StatusOK, counts)
}

// authorized compares hashes in constant time, so that neither the token's bytes nor
// its length leak through timing.
func (h *Handler) authorized(got string) bool {
	if h.cfg.AuthHeader == "" {
		return true
	}
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], h.auth[:]) == 1
}

func (h *Handler) failed(c echo.Context, err error) error {
	h.m.WebhookBatches.WithLabelValues("error").Inc()
	if errors.Is(err, context.Canceled) {
		h.log.Info("webhook request canceled; the sink will redeliver", "error", err)
	} else {
		h.log.Error("webhook batch not recorded; the sink will redeliver", "error", err)
	}
	// The cause stays in the log: database errors name hosts, tables and constraints.
	return c.JSON(http.StatusServiceUnavailable, errorBody{"outcome not recorded, retry"})
}

// rows filters the batch down to pending work and processes it. It returns counts by
// disposition.
func (h *Handler) rows(ctx context.Context, rows []Row) (map[string]int, error) {
	counts := map[string]int{}
	now := time.Now()
	var items []process.Item
	var firstPoison error
	seen := make(map[string]bool, len(rows))
	for _, r := range rows {
		switch {
		case r.Err != nil:
			counts["poison"]++
			if firstPoison == nil {
				firstPoison = r.Err
			}
		case r.Deleted, !r.Journal.pending():
			counts["ignored"]++
		case r.Journal.Status == journal.StatusFailed && r.Journal.NextAttemptAt.After(now):
			counts["ignored"]++ // its own failure, coming back through the feed
		case seen[r.Journal.ID]:
			counts["ignored"]++ // one batch can hold several versions of a row
		default:
			seen[r.Journal.ID] = true
			items = append(items, process.Item{ID: r.Journal.ID, AggregateID: r.Journal.AggregateID, SequenceNo: r.Journal.SequenceNo})
		}
	}
	outcomes, err := h.proc.ProcessBatch(ctx, items)
	for _, o := range outcomes {
		if o != "" {
			counts[string(o)]++
		}
	}
	for k, n := range counts {
		h.m.WebhookRows.WithLabelValues(k).Add(float64(n))
	}
	// One line per batch, whatever its size: a batch of a million bad rows must not
	// write a million lines. Batches with unusable rows warn, at most once a minute.
	if firstPoison != nil {
		if ok, dropped := h.warn.Allow("poison"); ok {
			h.log.Warn("unusable changefeed rows skipped; their journal entries are left to the sweeper",
				"rows", len(rows), "poison", counts["poison"], "first_error", firstPoison, "batches_not_logged", dropped)
		}
	} else {
		h.log.Debug("webhook batch", "rows", len(rows), "counts", counts)
	}
	return counts, err
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
