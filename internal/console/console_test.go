package console

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/database"
)

func newEcho(t *testing.T, cfg Config) *echo.Echo {
	t.Helper()
	e := echo.New()
	if err := Register(e, cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func get(e *echo.Echo, path string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec
}

// What a strict CSP would block must not be in the pages in the first place: inline
// scripts, inline styles, event-handler attributes, javascript: URLs.
var (
	inline  = regexp.MustCompile(`(?i)\sstyle=|<style|\son[a-z]+=|=\s*"?\s*javascript:`)
	scripts = regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`)
)

func TestPages(t *testing.T) {
	e := newEcho(t, Config{})
	for _, path := range []string{"/ui/", "/ui/journal", "/ui/failures", "/ui/quarantine", "/ui/replays", "/ui/replays?run=6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01", "/ui/feed", "/ui/login",
		"/ui/events/6f1c1f0e-1c3a-4c55-9a65-8b7e2d1f0a01"} {
		rec := get(e, path)
		if rec.Code != http.StatusOK {
			t.Errorf("%s: %d", path, rec.Code)
			continue
		}
		body := rec.Body.String()
		if m := inline.FindString(body); m != "" {
			t.Errorf("%s has inline code: %q", path, m)
		}
		for _, m := range scripts.FindAllStringSubmatch(body, -1) {
			if !strings.Contains(m[1], " src=") || strings.TrimSpace(m[2]) != "" {
				t.Errorf("%s has an inline script: %q", path, m[0])
			}
		}
		if got := rec.Header().Get("Content-Security-Policy"); got != CSP {
			t.Errorf("%s: CSP %q", path, got)
		}
		if !strings.Contains(body, `<script src="/ui/static/console.js" defer></script>`) {
			t.Errorf("%s does not load the console script", path)
		}
		if rec.Header().Get("Cache-Control") != "no-store" || rec.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, rec.Header())
		}
	}
	for _, path := range []string{"/ui/events/not-a-uuid", "/ui/nope", "/ui/events/%3Cscript%3E"} {
		rec := get(e, path)
		if rec.Code != http.StatusNotFound || strings.Contains(rec.Body.String(), "<script>") {
			t.Errorf("%s: %d %q", path, rec.Code, rec.Body.String())
		}
	}
	if rec := get(e, "/ui"); rec.Code != http.StatusMovedPermanently || rec.Header().Get("Location") != "/ui/" {
		t.Errorf("/ui: %d %v", rec.Code, rec.Header())
	}
	for path, ct := range map[string]string{"/ui/static/console.js": "text/javascript", "/ui/static/console.css": "text/css",
		"/ui/static/favicon.svg": "image/svg+xml"} {
		rec := get(e, path)
		if rec.Code != http.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), ct) ||
			rec.Header().Get("Content-Security-Policy") != CSP || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: %d %v", path, rec.Code, rec.Header())
		}
	}
	// No directory listing of the embedded files.
	if rec := get(e, "/ui/static/"); rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), "console.js") {
		t.Errorf("/ui/static/ lists files")
	}
}

// The feed page says what drives processing on each database.
func TestFeedPage(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "The sweeper drives processing"},
		{Config{Dialect: database.CockroachDB, WebhookURL: "webhook-https://inboxd:8443/changefeed"}, "webhook-https://inboxd:8443/changefeed"},
	} {
		body := get(newEcho(t, tc.cfg), "/ui/feed").Body.String()
		if !strings.Contains(body, tc.want) {
			t.Errorf("feed page for %+v lacks %q", tc.cfg, tc.want)
		}
	}
}
