package api

import (
	"context"
	_ "embed"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/logx"
)

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the core's embedded OpenAPI 3 document, without extensions.
func OpenAPI() []byte { return openAPIDoc }

// serveOpenAPI is GET /openapi.json: the core document with the extensions' paths.
func (s *Server) serveOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.openAPI)
}

// GET /healthz: the process is up and serving.
func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

type readyResponse struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// GET /readyz: the database and every configured dependency answer. Checks run
// concurrently, each bounded by ReadyTimeout; a 503 names the ones that failed.
func (s *Server) readyz(c echo.Context) error {
	checks := append([]ReadyCheck{{Name: "database", Check: s.cfg.Pool.Ping}}, s.cfg.Ready...)
	results := make(map[string]string, len(checks))
	var failed []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ch := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(c.Request().Context(), s.cfg.ReadyTimeout)
			defer cancel()
			err := ch.Check(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && journal.IsSchemaContracted(err) {
				// Says what to do, and names nothing secret; logged once, at ERROR, where
				// it was found (journal.Contraction).
				results[ch.Name] = "failed: " + journal.ErrSchemaContracted.Error()
				failed = append(failed, ch.Name)
				return
			}
			if err != nil {
				// Unauthenticated endpoint: the cause (hosts, users) goes to the log only.
				results[ch.Name] = "failed"
				failed = append(failed, ch.Name)
				// Once per outage at WARN: a probe every few seconds would repeat it.
				s.readiness(ch.Name).Fail("readiness check failed", err)
				return
			}
			results[ch.Name] = "ok"
			s.readiness(ch.Name).Recovered("readiness check passes again")
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		sort.Strings(failed)
		s.readiness("").Fail("not ready", errors.New(strings.Join(failed, ", ")))
		return Unavailable("not ready: "+strings.Join(failed, ", "), results, nil)
	}
	s.readiness("").Recovered("ready again")
	return c.JSON(http.StatusOK, readyResponse{Status: "ready", Checks: results})
}

// readiness is the outage log of one readiness check, or of readiness as a whole ("").
func (s *Server) readiness(check string) *logx.Outage {
	s.readyMu.Lock()
	defer s.readyMu.Unlock()
	o := s.readyOut[check]
	if o == nil {
		what := "readiness"
		if check != "" {
			what = "readiness check " + check
		}
		o = &logx.Outage{Log: s.log, What: what, Level: slog.LevelWarn}
		s.readyOut[check] = o
	}
	return o
}
