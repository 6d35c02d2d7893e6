package api

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// crossOrigin is net/http's CSRF check: a state-changing request that a browser marks as
// cross-site (Sec-Fetch-Site) or whose Origin is not the Host is refused. Requests
// without either header (curl, programs) pass: they carry no ambient credentials. This
// matters most when no admin token is set, where a page on another site could otherwise
// make an operator's browser POST a replay to a loopback inboxd.
var crossOrigin = http.NewCrossOriginProtection()

// refuseCrossOrigin answers 403 to cross-origin browser requests with unsafe methods.
func refuseCrossOrigin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := crossOrigin.Check(c.Request()); err != nil {
			return &httpError{status: http.StatusForbidden, msg: "cross-origin request refused",
				detail: "state-changing requests must come from the same origin (or from a non-browser client)"}
		}
		return next(c)
	}
}
