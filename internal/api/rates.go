package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/journal"
)

// rateBucket is the width of one /journal/rates bucket.
const rateBucket = 10 * time.Second

type ratesResponse struct {
	BucketSeconds int        `json:"bucket_seconds"`
	Now           time.Time  `json:"now"`
	Buckets       []rateJSON `json:"buckets"`
}

type rateJSON struct {
	Start     time.Time `json:"start"`
	Journaled int64     `json:"journaled"`
	Processed int64     `json:"processed"`
}

// GET /journal/rates?minutes=N: what the console's overview chart draws.
func (s *Server) journalRates(c echo.Context) error {
	minutes := 10
	for name, vs := range c.QueryParams() {
		if name != "minutes" {
			return BadRequest("invalid query", map[string]string{name: "unknown parameter"})
		}
		n, err := strconv.Atoi(vs[0])
		if len(vs) != 1 || err != nil || n < 1 || n > 60 {
			return BadRequest("invalid query", map[string]string{"minutes": "must be an integer from 1 to 60, given once"})
		}
		minutes = n
	}
	bs, now, err := journal.Rates(c.Request().Context(), s.db, time.Duration(minutes)*time.Minute, rateBucket)
	if err != nil {
		return Internal("reading journal rates", err)
	}
	out := ratesResponse{BucketSeconds: int(rateBucket / time.Second), Now: now, Buckets: make([]rateJSON, len(bs))}
	for i, b := range bs {
		out.Buckets[i] = rateJSON{Start: b.Start, Journaled: b.Journaled, Processed: b.Processed}
	}
	return c.JSON(http.StatusOK, out)
}
