package api

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/feed"
)

type feedResponse struct {
	// Database is "cockroachdb" or "postgresql"; PostgreSQL has no changefeed, and the
	// sweeper drives processing there.
	Database string    `json:"database"`
	Jobs     []feedJob `json:"jobs"`
}

type feedJob struct {
	ID            int64      `json:"id"`
	Status        string     `json:"status"`
	RunningStatus string     `json:"running_status"`
	HighWater     string     `json:"high_water"`
	HighWaterAt   *time.Time `json:"high_water_at"`
	LagSeconds    *float64   `json:"lag_seconds"`
	Error         string     `json:"error"`
	SinkURI       string     `json:"sink_uri"`    // secrets redacted
	Description   string     `json:"description"` // secrets redacted
}

// GET /admin/feed: the changefeed jobs as SHOW CHANGEFEED JOBS reports them (what
// `inboxd changefeed status` prints), secrets redacted by internal/feed.
func (s *Server) adminFeed(c echo.Context) error {
	ctx := c.Request().Context()
	if !s.cfg.Dialect.Changefeed() {
		return c.JSON(http.StatusOK, feedResponse{Database: s.cfg.Dialect.String(), Jobs: []feedJob{}})
	}
	jobs, err := feed.NewManager(s.db, s.cfg.Dialect, s.log).List(ctx)
	if err != nil {
		return Internal("listing changefeed jobs", err)
	}
	out := feedResponse{Database: s.cfg.Dialect.String(), Jobs: make([]feedJob, 0, len(jobs))}
	now := time.Now()
	for _, j := range jobs {
		fj := feedJob{ID: j.ID, Status: j.Status, RunningStatus: j.RunningStatus, HighWater: j.HighWater, Error: j.Error,
			SinkURI: j.SinkURI, Description: j.Description}
		if hw := j.HighWaterTime(); !hw.IsZero() {
			lag := now.Sub(hw).Seconds()
			fj.HighWaterAt, fj.LagSeconds = &hw, &lag
		}
		out.Jobs = append(out.Jobs, fj)
	}
	return c.JSON(http.StatusOK, out)
}
