package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/feed"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

// Prefix is where the console is served.
const Prefix = "/ui"

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config describes the deployment the feed page explains; the console reads no data
// itself.
type Config struct {
	// Dialect is the database's (database.Detect): on CockroachDB a changefeed feeds
	// the webhook; on PostgreSQL the sweeper drives processing.
	Dialect       database.Dialect
	WebhookURL    string        // the changefeed's sink, e.g. webhook-https://inboxd:8443/changefeed
	SweepInterval time.Duration // how often the sweeper looks for due work
	SweepGrace    time.Duration // how long a RECEIVED row waits for the feed
}

// CSP is the Content-Security-Policy of every console response: nothing inline, nothing
// from elsewhere, no framing, forms and fetches to this origin only.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

type page struct {
	Name  string // template name and nav key
	Title string
	Path  string // under Prefix
}

var pages = []page{
	{"overview", "Overview", "/"},
	{"journal", "Journal", "/journal"},
	{"failures", "Failures", "/failures"},
	{"quarantine", "Quarantine", "/quarantine"},
	{"replays", "Replays", "/replays"},
	{"feed", "Feed", "/feed"},
}

// view is what a template sees.
type view struct {
	Page     page
	Nav      []page
	Prefix   string
	Statuses []journal.Status
	Retry    []journal.Status
	Reasons  []string
	// RunStates are the states of a replay run (journal.RunPlanned …).
	RunStates []string
	Cfg       Config
	EventID   string
}

// Reasons a message is quarantined for (see internal/journal and docs/recoverability.md).
var reasons = []string{"not_json", "not_object", "missing_id", "invalid_id", "missing_type", "invalid_header", "invalid_field", "too_large", "id_conflict",
	"missing_source", "missing_specversion", "invalid_attribute"} // the last three: CloudEvents

var runStates = []string{journal.RunPlanned, journal.RunRunning, journal.RunPaused, journal.RunDone, journal.RunCancelled}

type console struct {
	cfg  Config
	tmpl map[string]*template.Template
}

// Register mounts the console under Prefix on e, the API's Echo instance, so that every
// middleware of the API applies to it too.
func Register(e *echo.Echo, cfg Config) error {
	// The pages hold no data and are served without a token: the sink URL is shown as
	// /journal/stats shows it, without credentials or certificate parameters.
	cfg.WebhookURL = feed.RedactSinkURI(cfg.WebhookURL)
	c := &console{cfg: cfg, tmpl: map[string]*template.Template{}}
	funcs := template.FuncMap{"dur": func(d time.Duration) string { return d.String() }}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return fmt.Errorf("console: parsing layout: %w", err)
	}
	for _, name := range []string{"overview", "journal", "event", "failures", "quarantine", "replays", "feed", "login", "notfound"} {
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html")
		if err != nil {
			return fmt.Errorf("console: parsing %s: %w", name, err)
		}
		c.tmpl[name] = t
	}
	static, err := fs.Sub(staticFS, "static")
	if err != nil {
		return fmt.Errorf("console: static files: %w", err)
	}
	files := http.StripPrefix(Prefix+"/static/", http.FileServer(http.FS(static)))

	g := e.Group(Prefix, securityHeaders)
	e.GET(Prefix, func(ec echo.Context) error { return ec.Redirect(http.StatusMovedPermanently, Prefix+"/") }, securityHeaders)
	for _, p := range pages {
		p := p
		g.GET(p.Path, func(ec echo.Context) error { return c.render(ec, http.StatusOK, p.Name, p, "") })
	}
	g.GET("/login", func(ec echo.Context) error {
		return c.render(ec, http.StatusOK, "login", page{Name: "login", Title: "Sign in", Path: "/login"}, "")
	})
	g.GET("/events/:id", func(ec echo.Context) error {
		id, ok := message.CanonicalUUID(ec.Param("id"))
		if !ok {
			return c.render(ec, http.StatusNotFound, "notfound", page{Name: "notfound", Title: "Not found"}, "")
		}
		return c.render(ec, http.StatusOK, "event", page{Name: "event", Title: "Event " + id[:8], Path: "/events/" + id}, id)
	})
	g.GET("/static/*", func(ec echo.Context) error {
		if p := ec.Param("*"); p == "" || strings.HasSuffix(p, "/") {
			return c.render(ec, http.StatusNotFound, "notfound", page{Name: "notfound", Title: "Not found"}, "") // no listings
		}
		ec.Response().Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(ec.Response(), ec.Request())
		return nil
	})
	g.GET("/*", func(ec echo.Context) error {
		return c.render(ec, http.StatusNotFound, "notfound", page{Name: "notfound", Title: "Not found"}, "")
	})
	return nil
}

func (c *console) render(ec echo.Context, status int, name string, p page, eventID string) error {
	t := c.tmpl[name]
	if t == nil {
		return errors.New("console: no template " + name)
	}
	var buf bytes.Buffer
	v := view{Page: p, Nav: pages, Prefix: Prefix, Statuses: journal.Statuses, Retry: journal.RetryableStatuses,
		Reasons: reasons, RunStates: runStates, Cfg: c.cfg, EventID: eventID}
	if err := t.ExecuteTemplate(&buf, "layout.html", v); err != nil {
		return fmt.Errorf("console: rendering %s: %w", name, err)
	}
	ec.Response().Header().Set("Cache-Control", "no-store")
	return ec.HTMLBlob(status, buf.Bytes())
}

// securityHeaders sets the console's headers on every response under Prefix.
func securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if strings.HasSuffix(c.Request().URL.Path, ".js") {
			h.Set("Content-Type", "text/javascript; charset=utf-8")
		}
		return next(c)
	}
}
