package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/outbox"
)

// audit logs an operator action: what, on what, how many, from where. Never a secret.
func (s *Server) audit(c echo.Context, action string, args ...any) {
	s.log.Info("admin action", append([]any{"action", action, "remote", c.RealIP(), "request_id", RequestID(c)}, args...)...)
}

func filterAttrs(f journal.Filter) map[string]any {
	m := map[string]any{}
	if f.EventType != "" {
		m["type"] = f.EventType
	}
	if len(f.Statuses) > 0 {
		m["status"] = f.Statuses
	}
	if len(f.Contains) > 0 {
		// Only the field names: payload values can be personal data (emails, names).
		var fields map[string]json.RawMessage
		if json.Unmarshal(f.Contains, &fields) == nil {
			keys := make([]string, 0, len(fields))
			for k := range fields {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			m["payload_fields"] = keys
		}
	}
	if !f.Since.IsZero() {
		m["since"] = f.Since
	}
	if !f.Until.IsZero() {
		m["until"] = f.Until
	}
	return m
}

// GET /admin/events: failed, dead and rejected entries.
func (s *Server) adminListEvents(c echo.Context) error {
	q, err := parseEventQuery(c.QueryParams(), journal.RetryableStatuses, true)
	if err != nil {
		return err
	}
	return s.respondEvents(c, q)
}

type retryResponse struct {
	ID      string         `json:"id"`
	Status  journal.Status `json:"status"`
	Retried bool           `json:"retried"`
}

// POST /admin/events/{id}/retry requeues one FAILED, DEAD or REJECTED entry (status
// FAILED, attempts 0, due now). Repeating it is harmless. An entry that is RECEIVED is
// already pending: 200 with retried false. A PROCESSED entry is 409: use replay.
func (s *Server) adminRetryOne(c echo.Context) error {
	id, err := parseEventRef(c.Param("id"))
	if err != nil {
		return err
	}
	r, err := journal.RetryOne(c.Request().Context(), s.db, id)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return notFound("no journal entry with this id")
	case errors.Is(err, journal.ErrNotRetryable) && r.Status == journal.StatusProcessed:
		s.audit(c, "retry", "id", id, "count", 0, "status", r.Status)
		return &httpError{status: http.StatusConflict, msg: "entry is already processed",
			detail: map[string]string{"id": id, "status": string(r.Status), "hint": "POST /admin/events/replay to process it again"}}
	case errors.Is(err, journal.ErrNotRetryable):
		s.audit(c, "retry", "id", id, "count", 0, "status", r.Status)
		return c.JSON(http.StatusOK, retryResponse{ID: id, Status: r.Status, Retried: false})
	case err != nil:
		return Internal("retrying entry", err)
	}
	s.audit(c, "retry", "id", id, "count", 1)
	return c.JSON(http.StatusOK, retryResponse{ID: id, Status: r.Status, Retried: true})
}

type skipRequest struct {
	// By names the operator who skips the entry; it is recorded with it.
	By string `json:"by"`
}

type skipResponse struct {
	ID        string         `json:"id"`
	Status    journal.Status `json:"status"`
	Skipped   bool           `json:"skipped"`
	SkippedBy *string        `json:"skipped_by"`
	SkippedAt *time.Time     `json:"skipped_at"`
}

// maxSkipBy bounds the operator name recorded with a skip or an edit.
const maxSkipBy = 200

// operatorName is by trimmed, or a 400 (problem title what) unless it names the
// operator in 1 to maxSkipBy bytes of storable UTF-8.
func operatorName(by, what string) (string, error) {
	by = strings.TrimSpace(by)
	if by == "" || len(by) > maxSkipBy || !utf8.ValidString(by) || strings.ContainsRune(by, 0) {
		return "", BadRequest(what, map[string]string{"by": fmt.Sprintf("must name the operator: 1 to %d bytes of UTF-8", maxSkipBy)})
	}
	return by, nil
}

// entryRequest reads the {id} of an admin action on one row and decodes its JSON body
// into req; optional: an empty body leaves req as it is. A journal entry's id may be
// its event id too (parseEventRef); a quarantined message's is its UUID.
func entryRequest(c echo.Context, req any, optional bool) (string, error) {
	parse := parseEventRef
	if strings.HasPrefix(c.Path(), "/admin/quarantine/") {
		parse = parseID
	}
	id, err := parse(c.Param("id"))
	if err != nil {
		return "", err
	}
	body, err := ReadBody(c)
	if err != nil {
		return "", err
	}
	if optional && len(bytes.TrimSpace(body)) == 0 {
		return id, nil
	}
	return id, decodeStrict(body, req)
}

// decodeStrict decodes one JSON object into v: unknown fields and trailing data are
// a 400.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return BadRequest("invalid JSON body", JSONProblem(err))
	}
	if dec.More() {
		return BadRequest("invalid JSON body", "trailing data after the JSON object")
	}
	return nil
}

// POST /admin/events/{id}/skip skips one DEAD entry: it stays DEAD, records who skipped
// it and when, and no longer parks its aggregate, whose successors run on. The body
// names the operator: {"by": "alice@example.com"}. Skipping an entry already skipped
// changes nothing (200, skipped false); an entry that is not DEAD is 409 (retry it, or
// wait for it).
func (s *Server) adminSkipOne(c echo.Context) error {
	var req skipRequest
	id, err := entryRequest(c, &req, false)
	if err != nil {
		return err
	}
	if req.By, err = operatorName(req.By, "invalid skip"); err != nil {
		return err
	}
	r, err := journal.Skip(c.Request().Context(), s.db, id, req.By)
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return notFound("no journal entry with this id")
	case errors.Is(err, journal.ErrNotSkippable) && r.Status == journal.StatusDead:
		s.audit(c, "skip", "id", id, "count", 0, "by", req.By)
		return c.JSON(http.StatusOK, skipResponse{ID: id, Status: r.Status, SkippedBy: r.SkippedBy, SkippedAt: utcPtr(r.SkippedAt)})
	case errors.Is(err, journal.ErrNotSkippable):
		s.audit(c, "skip", "id", id, "count", 0, "status", r.Status)
		return &httpError{status: http.StatusConflict, msg: "only a DEAD entry can be skipped",
			detail: map[string]string{"id": id, "status": string(r.Status)}}
	case err != nil:
		return Internal("skipping entry", err)
	}
	s.audit(c, "skip", "id", id, "count", 1, "by", req.By)
	return c.JSON(http.StatusOK, skipResponse{ID: id, Status: r.Status, Skipped: true, SkippedBy: r.SkippedBy, SkippedAt: utcPtr(r.SkippedAt)})
}

type bulkResponse struct {
	Action string `json:"action"`
	DryRun bool   `json:"dry_run"`
	// Count is how many entries were requeued, or would be on a dry run.
	Count int64 `json:"count"`
}

// POST /admin/events/retry requeues every FAILED, DEAD or REJECTED entry matching the filter.
func (s *Server) adminRetryFilter(c echo.Context) error {
	return s.bulk(c, journal.Retry)
}

// POST /admin/events/replay requeues every entry matching the filter, PROCESSED included.
func (s *Server) adminReplay(c echo.Context) error {
	return s.bulk(c, journal.Replay)
}

func (s *Server) bulk(c echo.Context, mode journal.RequeueMode) error {
	body, err := ReadBody(c)
	if err != nil {
		return err
	}
	var allowed []journal.Status
	if mode == journal.Retry {
		allowed = journal.RetryableStatuses
	}
	f, dry, err := parseFilterBody(body, allowed)
	if err != nil {
		return err
	}
	if mode == journal.Replay && f.IsZero() {
		// Replaying the whole journal is never what a typo meant.
		return BadRequest("replay needs a filter", "give at least one of status, type, payload, since, until")
	}
	ctx := c.Request().Context()
	var n int64
	if dry {
		n, err = journal.CountMatching(ctx, s.db, f, mode)
	} else {
		n, err = journal.Requeue(ctx, s.db, f, mode)
	}
	if err != nil {
		s.audit(c, mode.String(), "filter", filterAttrs(f), "dry_run", dry, "count", n, "err", err.Error())
		if journal.IsDataError(err) {
			return BadRequest("the filter cannot be evaluated", err.Error())
		}
		if dry {
			return Internal(mode.String()+" dry run failed; nothing was changed", err)
		}
		return Internal(fmt.Sprintf("%s failed after requeueing %d entries; repeating is harmless", mode, n), err)
	}
	s.audit(c, mode.String(), "filter", filterAttrs(f), "dry_run", dry, "count", n)
	return c.JSON(http.StatusOK, bulkResponse{Action: mode.String(), DryRun: dry, Count: n})
}

// quarantineItem is a quarantine row without its body.
type quarantineItem struct {
	ID           string            `json:"id"`
	Reason       string            `json:"reason"`
	Detail       string            `json:"detail"`
	Destination  string            `json:"destination"`
	MessageID    string            `json:"message_id"`
	Headers      map[string]string `json:"headers"`
	EventID      *string           `json:"event_id"`
	ReceivedAt   time.Time         `json:"received_at"`
	ReinjectedAt *time.Time        `json:"reinjected_at"`
	Size         int64             `json:"size"`
}

func toQuarantineItem(q journal.QuarantineRecord) quarantineItem {
	h := q.Headers
	if h == nil {
		h = map[string]string{}
	}
	return quarantineItem{ID: q.ID, Reason: q.Reason, Detail: q.Detail, Destination: q.Destination, MessageID: q.MessageID,
		Headers: h, EventID: q.EventID, ReceivedAt: q.ReceivedAt.UTC(), ReinjectedAt: utcPtr(q.ReinjectedAt), Size: q.Size}
}

// GET /admin/quarantine
func (s *Server) adminListQuarantine(c echo.Context) error {
	qp := c.QueryParams()
	problems := map[string]string{}
	p := parsePage(qp, cursorQuarantine, problems)
	reason, _ := single(qp, "reason", problems)
	if !validText(reason) {
		problems["reason"] = "must be UTF-8 without NUL"
	}
	for name := range qp {
		switch name {
		case "limit", "order", "cursor", "reason":
		default:
			problems[name] = "unknown parameter"
		}
	}
	if len(problems) > 0 {
		return BadRequest("invalid query", problems)
	}
	jp := journal.QuarantinePage{Limit: p.Limit, Desc: p.Desc}
	if p.Cursor != nil {
		jp.After = &journal.QuarantineKey{ReceivedAt: *p.Cursor.At, ID: p.Cursor.ID}
	}
	rows, more, err := journal.ListQuarantine(c.Request().Context(), s.db, reason, jp)
	if err != nil {
		return Internal("listing quarantine", err)
	}
	out := page[quarantineItem]{Items: make([]quarantineItem, 0, len(rows))}
	for _, r := range rows {
		out.Items = append(out.Items, toQuarantineItem(r))
	}
	if more {
		last := rows[len(rows)-1]
		at := last.ReceivedAt.UTC()
		out.NextCursor = encodeCursor(cursor{Kind: cursorQuarantine, Desc: p.Desc, At: &at, ID: last.ID})
	}
	out.Links = pageLinks(c, out.NextCursor)
	return c.JSON(http.StatusOK, out)
}

// GET /admin/quarantine/{id}/body: the raw bytes as received.
func (s *Server) adminQuarantineBody(c echo.Context) error {
	id, err := parseID(c.Param("id"))
	if err != nil {
		return err
	}
	_, body, err := journal.QuarantineBody(c.Request().Context(), s.db, id)
	if errors.Is(err, journal.ErrNotFound) {
		return notFound("no quarantine row with this id")
	}
	if err != nil {
		return Internal("reading quarantine body", err)
	}
	s.audit(c, "quarantine_download", "id", id, "count", 1, "size", len(body))
	c.Response().Header().Set(echo.HeaderContentDisposition, `attachment; filename="`+id+`.bin"`)
	c.Response().Header().Set("X-Content-Type-Options", "nosniff")
	return c.Blob(http.StatusOK, echo.MIMEOctetStream, body)
}

type reinjectRequest struct {
	// Destination overrides the row's destination, e.g. after fixing a misrouted producer.
	Destination string `json:"destination"`
	// Force publishes again a row that was already reinjected.
	Force bool `json:"force"`
}

type reinjectResponse struct {
	ID           string     `json:"id"`
	Status       string     `json:"status"` // "reinjected" or "already_reinjected"
	Destination  string     `json:"destination"`
	ReinjectedAt *time.Time `json:"reinjected_at"`
}

// Headers copied from the quarantined message when reinjecting it; the broker sets the rest.
var reinjectHeaders = []string{HeaderContentType, message.HeaderEventType, message.HeaderAggregateID}

// HeaderReinjectedFrom names the quarantine row a reinjected message came from.
const HeaderReinjectedFrom = "inboxd-reinjected-from"

// POST /admin/quarantine/{id}/reinject publishes the raw body again, to its destination
// or the one given, then marks the row reinjected. A second call on a reinjected row is
// a 200 no-op ("already_reinjected") unless "force": true.
func (s *Server) adminReinject(c echo.Context) error {
	var req reinjectRequest
	id, err := entryRequest(c, &req, true)
	if err != nil {
		return err
	}
	if req.Destination != "" {
		// Emit's rule: a composite destination (commas) or a wildcard would copy the
		// quarantined body, personal data included, to destinations nobody named.
		if err := message.CheckDestination(req.Destination); err != nil {
			return BadRequest("invalid destination", map[string]string{"destination": err.Error()})
		}
	}
	var dest string
	var pubErr, destErr error
	res, err := journal.Reinject(c.Request().Context(), s.db, id, req.Force,
		func(ctx context.Context, q journal.QuarantineRecord, raw []byte) error {
			dest = q.Destination
			if req.Destination != "" {
				dest = req.Destination
			}
			if destErr = message.CheckDestination(dest); destErr != nil {
				return destErr // a row journaled before the rule, or from a composite subscription
			}
			headers := map[string]string{HeaderReinjectedFrom: q.ID}
			for _, h := range reinjectHeaders {
				if v := q.Headers[h]; v != "" {
					headers[h] = v
				}
			}
			for h, v := range q.Headers { // a binary-mode CloudEvent's attributes
				if message.IsCloudEventHeader(h) && len(headers) < outbox.MaxHeaders {
					headers[h] = v
				}
			}
			ctx, cancel := context.WithTimeout(ctx, s.cfg.PublishTimeout)
			defer cancel()
			pubErr = s.cfg.Publisher.Publish(ctx, dest, raw, headers)
			return pubErr
		})
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return notFound("no quarantine row with this id")
	case destErr != nil:
		return BadRequest("invalid destination", map[string]string{"destination": destErr.Error(),
			"hint": `give a valid one: {"destination": "/queue/<name>"}`})
	case errors.Is(err, journal.ErrBodyTruncated):
		s.audit(c, "reinject", "id", id, "count", 0, "err", "body truncated")
		return &httpError{status: http.StatusConflict, msg: "the quarantined body was truncated to fit the database; it cannot be reinjected",
			detail: map[string]string{"id": id, "hint": "the detail holds the whole body's size and SHA-256; republish it from its source"}}
	case pubErr != nil:
		s.audit(c, "reinject", "id", id, "destination", dest, "count", 0, "err", pubErr.Error())
		return Unavailable("broker unavailable", map[string]string{"id": id, "hint": "nothing was marked; retry"}, nil)
	case err != nil:
		return Internal("reinjecting", err)
	}
	out := reinjectResponse{ID: id, Status: "reinjected", Destination: dest, ReinjectedAt: utcPtr(res.Record.ReinjectedAt)}
	if !res.Published {
		out.Status = "already_reinjected"
		out.Destination = ""
	}
	s.audit(c, "reinject", "id", id, "destination", dest, "force", req.Force, "count", boolCount(res.Published))
	return c.JSON(http.StatusOK, out)
}

func boolCount(b bool) int {
	if b {
		return 1
	}
	return 0
}
