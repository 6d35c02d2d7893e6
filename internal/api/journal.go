package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/outbox"
)

// entry is a journal entry as the API shows it.
type entry struct {
	ID            string          `json:"id"`
	EventType     string          `json:"event_type"`
	AggregateID   string          `json:"aggregate_id"`
	SequenceNo    int64           `json:"sequence_no"`
	Tag           string          `json:"tag"`
	Status        journal.Status  `json:"status"`
	Attempts      int             `json:"attempts"`
	LastError     *string         `json:"last_error"`
	NextAttemptAt time.Time       `json:"next_attempt_at"`
	ReceivedAt    time.Time       `json:"received_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
	ProcessedAt   *time.Time      `json:"processed_at"`
	Payload       json.RawMessage `json:"payload"`
	// SkippedBy and SkippedAt: a DEAD entry an operator skipped (POST /admin/events/{id}/skip).
	SkippedBy *string    `json:"skipped_by,omitempty"`
	SkippedAt *time.Time `json:"skipped_at,omitempty"`
	// WaitingBehind is the DEAD head a pending entry waits behind: its aggregate is parked.
	WaitingBehind *string `json:"waiting_behind,omitempty"`
	// Timeline is GET /journal/{id}'s attempt history, oldest first (the latest 200).
	Timeline []attemptJSON `json:"timeline,omitempty"`
	Links    Links         `json:"_links"`
}

// attemptJSON is one recorded handler attempt.
type attemptJSON struct {
	Attempt    int       `json:"attempt"`
	StartedAt  time.Time `json:"started_at"`
	DurationMS int64     `json:"duration_ms"`
	// Runs is 1 plus the immediate retries the attempt took.
	Runs       int       `json:"runs"`
	Outcome    string    `json:"outcome"`
	Error      *string   `json:"error"`
	RecordedAt time.Time `json:"recorded_at"`
	// An operator's edit (outcome EDITED): who, from where, and the payload before it.
	EditedBy        *string         `json:"edited_by,omitempty"`
	EditedFrom      *string         `json:"edited_from,omitempty"`
	OriginalPayload json.RawMessage `json:"original_payload,omitempty"`
}

func toEntry(r journal.Record) entry {
	return entry{
		ID: r.ID, EventType: r.EventType, AggregateID: r.AggregateID, SequenceNo: r.SequenceNo, Tag: r.Tag,
		Status: r.Status, Attempts: r.Attempts, LastError: r.LastError,
		NextAttemptAt: r.NextAttemptAt.UTC(), ReceivedAt: r.ReceivedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC(),
		ProcessedAt: utcPtr(r.ProcessedAt), Payload: r.Payload,
		SkippedBy: r.SkippedBy, SkippedAt: utcPtr(r.SkippedAt),
		Links: Links{
			"self":   {Href: "/journal/" + r.ID},
			"events": {Href: EventsPath(r.EventType)},
		},
	}
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// page is the body of every listing.
type page[T any] struct {
	Items []T `json:"items"`
	// NextCursor is absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Links has self, and next unless this is the last page.
	Links Links `json:"_links"`
}

// journalRef serves GET /journal/{type}-events and GET /journal/{id}.
func (s *Server) journalRef(c echo.Context) error {
	ref := c.Param("ref")
	if typ, ok := strings.CutSuffix(ref, "-events"); ok {
		if typ == "" || !validText(typ) {
			return notFound("no such event type")
		}
		return s.listEvents(c, typ)
	}
	return s.getEntry(c, ref)
}

func (s *Server) listEvents(c echo.Context, eventType string) error {
	q, err := parseEventQuery(c.QueryParams(), nil, false)
	if err != nil {
		return err
	}
	q.Filter.EventType = eventType
	return s.respondEvents(c, q)
}

func (s *Server) respondEvents(c echo.Context, q eventQuery) error {
	recs, more, err := journal.List(c.Request().Context(), s.db, q.Filter, q.journalPage())
	if err != nil {
		return Internal("listing journal", err)
	}
	out := page[entry]{Items: make([]entry, 0, len(recs))}
	for _, r := range recs {
		out.Items = append(out.Items, toEntry(r))
	}
	if more {
		out.NextCursor = encodeCursor(cursor{Kind: cursorJournal, Desc: q.Page.Desc, Seq: recs[len(recs)-1].SequenceNo})
	}
	out.Links = pageLinks(c, out.NextCursor)
	return c.JSON(http.StatusOK, out)
}

// parseID reads the :id parameter as a UUID.
func parseID(raw string) (string, error) {
	id, ok := message.CanonicalUUID(raw)
	if !ok {
		return "", BadRequest("invalid id", map[string]string{"id": "must be a UUID"})
	}
	return id, nil
}

// parseEventRef reads GET /journal/{id}'s id: the journal id (a UUID) or the event's
// own id as its publisher sent it (Event.Key, e.g. "ord-0001"), which message.JournalID
// maps to the journal id; a UUID key is its own journal id, so both readings agree. A
// CloudEvent's journal id comes from its source and id, so it is found by journal id.
func parseEventRef(raw string) (string, error) {
	if raw == "" || len(raw) > maxEventRef || !validText(raw) {
		return "", BadRequest("invalid id", map[string]string{"id": fmt.Sprintf("must be a journal id or an event id of 1 to %d bytes of text", maxEventRef)})
	}
	return message.JournalID(raw), nil
}

// maxEventRef bounds an event id in a path, as ingest bounds it (message.checkKey).
const maxEventRef = 1024

func (s *Server) getEntry(c echo.Context, raw string) error {
	id, err := parseEventRef(raw)
	if err != nil {
		return err
	}
	r, err := journal.Get(c.Request().Context(), s.db, id)
	if errors.Is(err, journal.ErrNotFound) {
		return notFound("no journal entry with this id")
	}
	if err != nil {
		return Internal("reading journal entry", err)
	}
	out := toEntry(r)
	attempts, err := journal.Attempts(c.Request().Context(), s.db, id)
	if err != nil {
		return Internal("reading journal entry", err)
	}
	out.Timeline = make([]attemptJSON, 0, len(attempts))
	for _, a := range attempts {
		out.Timeline = append(out.Timeline, attemptJSON{Attempt: a.Attempt, StartedAt: a.StartedAt.UTC(),
			DurationMS: a.Duration.Milliseconds(), Runs: a.Runs, Outcome: a.Outcome, Error: a.Error, RecordedAt: a.RecordedAt.UTC(),
			EditedBy: a.EditedBy, EditedFrom: a.EditedFrom, OriginalPayload: a.Original})
	}
	if r.Status.Pending() {
		head, parked, err := journal.ParkedBehind(c.Request().Context(), s.db, r.AggregateID, r.SequenceNo)
		if err != nil {
			return Internal("reading journal entry", err)
		}
		if parked {
			out.WaitingBehind = &head
			out.Links["waiting_behind"] = Link{Href: "/journal/" + head}
		}
	}
	return c.JSON(http.StatusOK, out)
}

type statsResponse struct {
	Total int64 `json:"total"`
	// Estimated: the journal holds more than journal.ExactCountLimit entries, so total and
	// by_status.PROCESSED are estimates and by_type has no PROCESSED counts.
	Estimated bool                                `json:"estimated"`
	ByStatus  map[journal.Status]int64            `json:"by_status"`
	ByType    map[string]map[journal.Status]int64 `json:"by_type"`
	// OldestPendingAgeSeconds is 0 when nothing is pending.
	OldestPendingAgeSeconds float64         `json:"oldest_pending_age_seconds"`
	OldestPendingReceivedAt *time.Time      `json:"oldest_pending_received_at"`
	Quarantine              quarantineStats `json:"quarantine"`
	FeedWatermarks          []watermarkJSON `json:"feed_watermarks"`
	Outbox                  outboxStats     `json:"outbox"`
}

// outboxStats is the transactional outbox: messages handlers emitted, and whether the
// broker has them yet.
type outboxStats struct {
	Unsent int64 `json:"unsent"`
	// Sent counts rows still retained (INBOXD_OUTBOX_RETENTION).
	Sent                   int64      `json:"sent"`
	OldestUnsentAgeSeconds float64    `json:"oldest_unsent_age_seconds"`
	OldestUnsentCreatedAt  *time.Time `json:"oldest_unsent_created_at"`
}

type quarantineStats struct {
	Total         int64 `json:"total"`
	NotReinjected int64 `json:"not_reinjected"`
}

type watermarkJSON struct {
	Sink       string    `json:"sink"`
	Resolved   string    `json:"resolved"`
	ResolvedAt time.Time `json:"resolved_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	LagSeconds float64   `json:"lag_seconds"`
}

func (s *Server) journalStats(c echo.Context) error {
	ctx := c.Request().Context()
	st, err := journal.ReadStats(ctx, s.db)
	if err != nil {
		return Internal("reading journal stats", err)
	}
	wms, err := s.cfg.Watermarks.Watermarks(ctx)
	if err != nil {
		return Internal("reading feed watermarks", err)
	}
	out := statsResponse{
		Total: st.Total, Estimated: st.Estimated, ByStatus: st.ByStatus, ByType: st.ByType,
		OldestPendingReceivedAt: utcPtr(st.OldestPending),
		Quarantine:              quarantineStats{Total: st.Quarantined, NotReinjected: st.QuarantineNotReinjected},
		FeedWatermarks:          make([]watermarkJSON, 0, len(wms)),
	}
	ob, err := outbox.ReadStats(ctx, s.db)
	if err != nil {
		return Internal("reading outbox stats", err)
	}
	out.Outbox = outboxStats{Unsent: ob.Unsent, Sent: ob.Sent, OldestUnsentAgeSeconds: ob.OldestUnsentAge().Seconds(),
		OldestUnsentCreatedAt: utcPtr(ob.OldestUnsent)}
	if st.OldestPending != nil {
		out.OldestPendingAgeSeconds = max(0, st.Now.Sub(*st.OldestPending).Seconds())
	}
	for _, w := range wms {
		out.FeedWatermarks = append(out.FeedWatermarks, watermarkJSON{
			Sink: feed.RedactSinkURI(w.Sink), Resolved: w.Resolved, ResolvedAt: w.ResolvedAt.UTC(), UpdatedAt: w.UpdatedAt.UTC(),
			LagSeconds: w.Lag.Seconds(),
		})
	}
	return c.JSON(http.StatusOK, out)
}
