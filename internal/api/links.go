package api

import (
	"net/http"
	"net/url"
	"sort"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/journal"
)

// link is a HAL-style link, as the reference tutorial's HATEOAS API writes them:
// "_links": {"self": {"href": "…"}}. Hrefs are relative to the API's root: built from
// the request's Host header they would let any client pick the links others follow.
type link struct {
	Href      string `json:"href"`
	Templated bool   `json:"templated,omitempty"`
	Title     string `json:"title,omitempty"`
}

type links map[string]link

// eventsPath is the listing of one event type.
func eventsPath(eventType string) string {
	return "/journal/" + url.PathEscape(eventType+"-events")
}

// pageLinks are a listing's self and (unless last) next links: the request's own
// path and query, with cursor set to the next page's.
func pageLinks(c echo.Context, next string) links {
	u := c.Request().URL
	self := u.EscapedPath()
	if u.RawQuery != "" {
		self += "?" + u.RawQuery
	}
	out := links{"self": {Href: self}}
	if next != "" {
		q := u.Query()
		q.Set("cursor", next)
		out["next"] = link{Href: u.EscapedPath() + "?" + q.Encode()}
	}
	return out
}

// index is GET /: where everything is, for readers exploring the API in a browser.
func (s *Server) index(c echo.Context) error {
	l := links{
		"self":                {Href: "/"},
		"registration-form":   {Href: "/registration/form", Title: "a sample registration; POST it back to /registration"},
		"registration":        {Href: "/registration", Title: "POST a registration (JSON)"},
		"journal":             {Href: "/journal", Title: "the journal's listings"},
		"registration-events": {Href: eventsPath("registration")},
		"events":              {Href: "/journal/{type}-events", Templated: true},
		"entry":               {Href: "/journal/{id}", Templated: true},
		"stats":               {Href: "/journal/stats"},
		"openapi":             {Href: "/openapi.json"},
		"health":              {Href: "/healthz"},
		"ready":               {Href: "/readyz"},
		"metrics":             {Href: "/metrics"},
	}
	if s.cfg.NoDemo {
		delete(l, "registration-form")
		delete(l, "registration")
		delete(l, "registration-events")
	}
	return c.JSON(http.StatusOK, map[string]any{
		"name":        "inboxd",
		"description": "exactly-once processing of at-least-once deliveries; follow _links",
		"_links":      l,
	})
}

// journalIndex is GET /journal: a listing link per event type in the journal.
func (s *Server) journalIndex(c echo.Context) error {
	st, err := journal.ReadStats(c.Request().Context(), s.cfg.Pool)
	if err != nil {
		return internal("reading journal stats", err)
	}
	types := make([]string, 0, len(st.ByType))
	for t := range st.ByType {
		types = append(types, t)
	}
	sort.Strings(types)
	l := links{
		"self":   {Href: "/journal"},
		"events": {Href: "/journal/{type}-events", Templated: true},
		"entry":  {Href: "/journal/{id}", Templated: true},
		"stats":  {Href: "/journal/stats"},
	}
	listings := make([]link, 0, len(types))
	for _, t := range types {
		listings = append(listings, link{Href: eventsPath(t), Title: t})
	}
	return c.JSON(http.StatusOK, map[string]any{"event_types": types, "listings": listings, "_links": l})
}

// registrationIndex is GET /registration: how to register, rather than a bare 405.
func (s *Server) registrationIndex(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]any{
		"description": "POST a registration as JSON here; GET the form for a valid sample",
		"_links": links{
			"self":   {Href: "/registration"},
			"form":   {Href: "/registration/form"},
			"events": {Href: eventsPath("registration")},
		},
	})
}
