package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/httpsec"
	"github.com/inboxd/inboxd/internal/journal"
)

// Error is the body of every error response.
type Error struct {
	Error  string `json:"error"`
	Detail any    `json:"detail"`
}

// httpError is an error a handler returns to answer with a given status and body.
type httpError struct {
	status int
	msg    string
	detail any
	cause  error // logged for 5xx, never sent
}

func (e *httpError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%d %s: %v", e.status, e.msg, e.cause)
	}
	return fmt.Sprintf("%d %s", e.status, e.msg)
}

func (e *httpError) Unwrap() error { return e.cause }

func BadRequest(msg string, detail any) error {
	return &httpError{status: http.StatusBadRequest, msg: msg, detail: detail}
}

func notFound(msg string) error { return &httpError{status: http.StatusNotFound, msg: msg} }

func Internal(msg string, cause error) error {
	return &httpError{status: http.StatusInternalServerError, msg: msg, cause: cause}
}

func Unavailable(msg string, detail any, cause error) error {
	return &httpError{status: http.StatusServiceUnavailable, msg: msg, detail: detail, cause: cause}
}

// handleError is Echo's HTTPErrorHandler: every error, Echo's own 404 and 405
// included, is answered as {"error": ..., "detail": ...}.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *httpError
	var ee *echo.HTTPError
	var denied *httpsec.Denied
	switch {
	case errors.As(err, &he):
	case errors.As(err, &denied):
		he = &httpError{status: denied.Status, msg: denied.Msg, detail: denied.Detail}
	case errors.As(err, &ee):
		he = &httpError{status: ee.Code, msg: strings.ToLower(http.StatusText(ee.Code)), cause: ee.Internal}
		if m, ok := ee.Message.(string); ok && m != "" {
			he.msg = strings.ToLower(m)
		}
	default:
		he = &httpError{status: http.StatusInternalServerError, msg: "internal error", cause: err}
	}
	if he.status >= 500 && journal.IsSchemaContracted(he.cause) {
		// A newer release contracted the schema under this one: the request cannot work
		// here again, and the instance logged it once, at ERROR (journal.Contraction),
		// so the request is not logged as an error of its own.
		s.log.Debug("request failed: schema contracted", "err", he.cause, "route", c.Path(), "request_id", RequestID(c))
		he = &httpError{status: http.StatusServiceUnavailable, msg: journal.ErrSchemaContracted.Error()}
	}
	if he.status >= 500 && he.cause != nil {
		if errors.Is(he.cause, context.Canceled) {
			s.log.Debug("request canceled", "path", c.Path(), "request_id", RequestID(c))
		} else {
			s.log.Error(he.msg, "err", he.cause, "method", c.Request().Method, "route", c.Path(), "request_id", RequestID(c))
		}
	}
	if he.status == http.StatusInternalServerError {
		// Internal errors say no more than the request id to look the log up by.
		he.detail = map[string]string{"request_id": RequestID(c)}
	}
	var werr error
	if c.Request().Method == http.MethodHead {
		werr = c.NoContent(he.status)
	} else {
		werr = c.JSON(he.status, Error{Error: he.msg, Detail: he.detail})
	}
	if werr != nil {
		s.log.Debug("writing error response", "err", werr)
	}
}

func RequestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

// logRequests logs one line per request. It never logs headers, so neither the
// Authorization header nor cookies can reach the log; the query string is left out too,
// as filters may carry personal data.
func (s *Server) logRequests(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // writes the response now, so the status below is the real one
		}
		req, res := c.Request(), c.Response()
		level := s.levelFor(c.Path(), res.Status)
		s.log.Log(req.Context(), level, "http request",
			"method", req.Method,
			"path", req.URL.Path,
			"route", c.Path(),
			"status", res.Status,
			"latency_ms", float64(time.Since(start).Microseconds())/1000,
			"bytes", res.Size,
			"remote", c.RealIP(),
			"request_id", RequestID(c))
		return nil
	}
}

func (s *Server) levelFor(route string, status int) slog.Level {
	switch {
	case route == "/readyz" && status == http.StatusServiceUnavailable:
		return slog.LevelDebug // the readiness checks log the outage, once
	case status >= 500:
		return slog.LevelWarn
	case route == "/healthz" || route == "/readyz" || route == "/metrics":
		return slog.LevelDebug // probes and scrapes would drown everything else
	default:
		return slog.LevelInfo
	}
}
