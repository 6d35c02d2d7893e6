package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"

	"github.com/labstack/echo/v4"
)

// setRequestID keeps a sane X-Request-Id from the client (to correlate with its logs)
// or assigns one, and echoes it in the response.
func setRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if id == "" || len(id) > 128 || !printableASCII(id) {
			id = randomHex(16)
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// recoverPanics turns a handler panic into a logged 500.
func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				panic(r)
			}
			s.log.Error("panic in handler", "panic", fmt.Sprint(r), "route", c.Path(), "request_id", RequestID(c), "stack", string(debug.Stack()))
			err = Internal("panic", fmt.Errorf("panic: %v", r))
		}()
		return next(c)
	}
}

// limitBody caps request bodies; reading past the cap fails with 413.
func limitBody(limit int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if req.ContentLength > limit {
				return tooLarge(limit)
			}
			req.Body = http.MaxBytesReader(c.Response(), req.Body, limit)
			return next(c)
		}
	}
}

func tooLarge(limit int64) error {
	return &httpError{status: http.StatusRequestEntityTooLarge, msg: "request body too large", detail: map[string]int64{"limit_bytes": limit}}
}

// readBody reads the request body, mapping the size cap to 413.
func ReadBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return nil, tooLarge(mbe.Limit)
	}
	if err != nil {
		return nil, BadRequest("reading request body", err.Error())
	}
	return b, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
