package api

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/journal"
)

// link is a HAL-style link, as the reference tutorial's HATEOAS API writes them:
// "_links": {"self": {"href": "…"}}. Hrefs are relative to the API's root: built from
// the request's Host header they would let any client pick the links others follow.
type Link struct {
	Href      string `json:"href"`
	Templated bool   `json:"templated,omitempty"`
	Title     string `json:"title,omitempty"`
}

type Links map[string]Link

// eventsPath is the listing of one event type.
func EventsPath(eventType string) string {
	return "/journal/" + url.PathEscape(eventType+"-events")
}

// pageLinks are a listing's self and (unless last) next links: the request's own
// path and query, with cursor set to the next page's.
func pageLinks(c echo.Context, next string) Links {
	u := c.Request().URL
	self := u.EscapedPath()
	if u.RawQuery != "" {
		self += "?" + u.RawQuery
	}
	out := Links{"self": {Href: self}}
	if next != "" {
		q := u.Query()
		q.Set("cursor", next)
		out["next"] = Link{Href: u.EscapedPath() + "?" + q.Encode()}
	}
	return out
}

// index is GET /: where everything is, for readers exploring the API in a browser.
func (s *Server) index(c echo.Context) error {
	l := Links{
		"self":    {Href: "/"},
		"journal": {Href: "/journal", Title: "the journal's listings"},
		"events":  {Href: "/journal/{type}-events", Templated: true},
		"entry":   {Href: "/journal/{id}", Templated: true},
		"stats":   {Href: "/journal/stats"},
		"openapi": {Href: "/openapi.json"},
		"health":  {Href: "/healthz"},
		"ready":   {Href: "/readyz"},
		"metrics": {Href: "/metrics"},
	}
	for _, x := range s.cfg.Extensions {
		for k, v := range x.Links {
			if _, ok := l[k]; !ok {
				l[k] = v
			}
		}
	}
	return c.JSON(http.StatusOK, map[string]any{
		"name":        "inboxd",
		"description": "exactly-once processing of at-least-once deliveries; follow _links",
		"_links":      l,
	})
}

// journalIndex is GET /journal: a listing link per event type in the journal.
func (s *Server) journalIndex(c echo.Context) error {
	types, err := journal.EventTypes(c.Request().Context(), s.db)
	if err != nil {
		return Internal("listing event types", err)
	}
	if types == nil {
		types = []string{}
	}
	l := Links{
		"self":   {Href: "/journal"},
		"events": {Href: "/journal/{type}-events", Templated: true},
		"entry":  {Href: "/journal/{id}", Templated: true},
		"stats":  {Href: "/journal/stats"},
	}
	listings := make([]Link, 0, len(types))
	for _, t := range types {
		listings = append(listings, Link{Href: EventsPath(t), Title: t})
	}
	return c.JSON(http.StatusOK, map[string]any{"event_types": types, "listings": listings, "_links": l})
}
