package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/journal"
)

type editRequest struct {
	// Payload is the corrected event: a JSON object, or a string holding one (what a
	// form's textarea gives).
	Payload json.RawMessage `json:"payload"`
	// By names the operator; it is recorded with the original payload.
	By string `json:"by"`
}

type editResponse struct {
	ID         string         `json:"id"`
	Status     journal.Status `json:"status"`
	Retried    bool           `json:"retried"`
	EditedBy   string         `json:"edited_by"`
	EditedFrom string         `json:"edited_from"`
	EditedAt   time.Time      `json:"edited_at"`
}

// POST /admin/events/{id}/edit-and-retry replaces the payload of one DEAD entry and
// retries it (as POST /admin/events/{id}/retry does). The payload as it was is kept in
// the entry's attempt history (GET /journal/{id}, "timeline", outcome EDITED) with who edited it, from where and
// when. The body: {"by": "alice@example.com", "payload": {…}}. The new payload keeps
// the entry's id, type and aggregate (journal.CheckEdit); it is at most the ingest's
// body limit.
func (s *Server) adminEditAndRetry(c echo.Context) error {
	var req editRequest
	id, err := entryRequest(c, &req, false)
	if err != nil {
		return err
	}
	if req.By, err = operatorName(req.By, "invalid edit"); err != nil {
		return err
	}
	payload := bytes.TrimSpace(req.Payload)
	if len(payload) == 0 || bytes.Equal(payload, []byte("null")) {
		return BadRequest("invalid edit", map[string]string{"payload": "required: the corrected event, a JSON object"})
	}
	if payload[0] == '"' {
		var text string
		if err := json.Unmarshal(payload, &text); err != nil {
			return BadRequest("invalid edit", map[string]string{"payload": err.Error()})
		}
		payload = []byte(text)
	}
	from := c.RealIP()
	r, ed, err := journal.EditAndRetry(c.Request().Context(), s.db, id, journal.EditRequest{
		Payload: payload, By: req.By, From: from, MaxBytes: s.cfg.MaxEventBytes, IDField: s.cfg.IDField})
	var refusal *journal.EditRefusal
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return notFound("no journal entry with this id")
	case errors.Is(err, journal.ErrNotEditable):
		s.audit(c, "edit_and_retry", "id", id, "count", 0, "status", r.Status, "by", req.By)
		return &httpError{status: http.StatusConflict, msg: "only a DEAD entry can be edited",
			detail: map[string]string{"id": id, "status": string(r.Status)}}
	case errors.As(err, &refusal):
		s.audit(c, "edit_and_retry", "id", id, "count", 0, "refused", refusal.Reason, "by", req.By)
		detail := map[string]string{"payload": refusal.Detail, "reason": refusal.Reason}
		if refusal.Field != "" {
			detail["field"] = refusal.Field
		}
		status := http.StatusBadRequest
		switch refusal.Reason {
		case journal.EditTooLarge:
			status = http.StatusRequestEntityTooLarge
		case journal.EditIdentityChanged:
			status = http.StatusUnprocessableEntity
		}
		return &httpError{status: status, msg: "edited payload refused", detail: detail}
	case err != nil:
		return Internal("editing entry", err)
	}
	// Never the payloads: they can hold personal data. The history keeps the original.
	s.audit(c, "edit_and_retry", "id", id, "count", 1, "by", req.By)
	return c.JSON(http.StatusOK, editResponse{ID: id, Status: r.Status, Retried: true,
		EditedBy: ed.EditedBy, EditedFrom: ed.EditedFrom, EditedAt: ed.EditedAt.UTC()})
}
