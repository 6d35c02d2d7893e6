package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/replay"
)

// Replay runs over REST: plan (POST /admin/replays), status (GET /admin/replays/:id),
// and start, pause, resume and cancel (POST /admin/replays/:id/<action>). The admin
// token's guard covers them, and each change is audited with the role that made it.

type replayPlanRequest struct {
	Type      string    `json:"type"`
	Statuses  []string  `json:"statuses"`
	Since     time.Time `json:"since"`
	Until     time.Time `json:"until"`
	Aggregate string    `json:"aggregate"`
	IDs       []string  `json:"ids"`
	NoTail    bool      `json:"no_tail"`
}

type replayStartRequest struct {
	Reason  string  `json:"reason"`
	Rate    float64 `json:"rate"`
	Publish bool    `json:"publish"`
}

// adminRole is who an /admin request acts as: the admin token's role (or localhost
// when no token is set), recorded as a run's started_by.
const adminRole = "admin"

func (s *Server) adminReplayPlan(c echo.Context) error {
	var req replayPlanRequest
	if err := c.Bind(&req); err != nil {
		return &httpError{status: http.StatusBadRequest, msg: "invalid replay selection"}
	}
	sel := journal.Selection{EventType: req.Type, Since: req.Since, Until: req.Until, AggregateID: req.Aggregate}
	for _, st := range req.Statuses {
		js := journal.Status(strings.ToUpper(st))
		if js != journal.StatusProcessed && js != journal.StatusRejected {
			return &httpError{status: http.StatusBadRequest, msg: "a replay takes PROCESSED or REJECTED events"}
		}
		sel.Statuses = append(sel.Statuses, js)
	}
	for _, id := range req.IDs {
		u, ok := message.CanonicalUUID(id)
		if !ok {
			return &httpError{status: http.StatusBadRequest, msg: "ids must be journal ids (UUIDs)"}
		}
		sel.IDs = append(sel.IDs, u)
	}
	run, _, err := replay.StorePlan(c.Request().Context(), s.cfg.Pool, sel, req.NoTail, 0)
	switch {
	case errors.Is(err, journal.ErrPlanTooLarge):
		return &httpError{status: http.StatusUnprocessableEntity, msg: err.Error()}
	case err != nil:
		return Internal("planning a replay", err)
	}
	s.audit(c, "replay plan", "run", run.ID, "events", run.Events)
	return s.replayStatus(c, run.ID, http.StatusCreated)
}

// adminReplayList lists the newest runs (limit, default 20, at most 100), of one state
// when given, each with its progress.
func (s *Server) adminReplayList(c echo.Context) error {
	state := c.QueryParam("state")
	switch state {
	case "", journal.RunPlanned, journal.RunRunning, journal.RunPaused, journal.RunCancelled, journal.RunDone:
	default:
		return BadRequest("unknown replay run state", "state is one of planned, running, paused, cancelled, done")
	}
	limit := 20
	if v := c.QueryParam("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > journal.MaxListReplayRuns {
			return BadRequest("invalid limit", "limit is a number from 1 to 100")
		}
		limit = n
	}
	runs, err := journal.ListReplayRuns(c.Request().Context(), s.db, state, limit)
	if err != nil {
		return Internal("listing replay runs", err)
	}
	if runs == nil {
		runs = []journal.ReplayRun{}
	}
	return c.JSON(http.StatusOK, map[string]any{"items": runs})
}

func (s *Server) adminReplayStatus(c echo.Context) error {
	id, ok := message.CanonicalUUID(c.Param("id"))
	if !ok {
		return notFound("no replay run with this id")
	}
	return s.replayStatus(c, id, http.StatusOK)
}

func (s *Server) replayStatus(c echo.Context, id string, code int) error {
	r, err := journal.GetReplayRun(c.Request().Context(), s.db, id, true)
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		return notFound("no replay run with this id")
	case err != nil:
		return Internal("reading a replay run", err)
	}
	return c.JSON(code, r)
}

func (s *Server) adminReplayAction(c echo.Context) error {
	id, ok := message.CanonicalUUID(c.Param("id"))
	if !ok {
		return notFound("no replay run with this id")
	}
	ctx := c.Request().Context()
	action := c.Param("action")
	var err error
	switch action {
	case "start":
		var req replayStartRequest
		if err := c.Bind(&req); err != nil || strings.TrimSpace(req.Reason) == "" || req.Rate < 0 {
			return &httpError{status: http.StatusBadRequest, msg: "start takes a reason and a rate of at least 0"}
		}
		err = journal.StartReplayRun(ctx, s.db, id, message.Truncate(req.Reason, 1000), adminRole, req.Rate, req.Publish)
	case "pause":
		err = journal.PauseReplayRun(ctx, s.db, id)
	case "resume":
		err = journal.ResumeReplayRun(ctx, s.db, id)
	case "cancel":
		err = journal.CancelReplayRun(ctx, s.db, id)
	default:
		return notFound("no such replay action")
	}
	switch {
	case errors.Is(err, journal.ErrRunNotFound):
		return notFound("no replay run with this id")
	case errors.Is(err, journal.ErrRunState):
		return &httpError{status: http.StatusConflict, msg: err.Error()}
	case err != nil:
		return Internal("changing a replay run", err)
	}
	s.audit(c, "replay "+action, "run", id, "role", adminRole)
	return s.replayStatus(c, id, http.StatusOK)
}
