package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/httpsec"
	"github.com/inboxd/inboxd/internal/journal"
)

const remote = "203.0.113.7:51000" // a client elsewhere on the network

// Issue 10: with no token configured, admin and the journal (personal data, the
// "is this e-mail registered?" oracle) were open to anyone on the network.
func TestNoTokenServesLocalhostOnly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	for _, tc := range []struct{ method, path, envVar string }{
		{"GET", "/admin/events", "INBOXD_ADMIN_TOKEN"},
		{"POST", "/admin/events/replay", "INBOXD_ADMIN_TOKEN"},
		{"GET", "/journal/registration-events", "INBOXD_READ_TOKEN"},
		{"GET", "/journal/registration-events?email=alice@example.com", "INBOXD_READ_TOKEN"},
		{"GET", "/journal/stats", "INBOXD_READ_TOKEN"},
	} {
		r := h.do(t, tc.method, tc.path, `{"type":"registration","dry_run":true}`, "RemoteAddr", remote, "Host", "inboxd.example:8090")
		detail := expectError(t, r, http.StatusForbidden)
		if s, _ := detail.(string); !strings.Contains(s, tc.envVar) {
			t.Errorf("%s %s: refusal %q does not name %s", tc.method, tc.path, s, tc.envVar)
		}
		// A proxy on the same machine, and a DNS-rebinding page in a local browser.
		expectError(t, h.do(t, tc.method, tc.path, `{}`, "X-Forwarded-For", "203.0.113.7"), http.StatusForbidden)
		expectError(t, h.do(t, tc.method, tc.path, `{}`, "Host", "attacker.example:8090"), http.StatusForbidden)
	}
	// The demo's public routes stay open, and localhost keeps working without ceremony.
	for _, path := range []string{"/healthz", "/openapi.json"} {
		if r := h.do(t, "GET", path, nil, "RemoteAddr", remote); r.Code != 200 {
			t.Errorf("GET %s from the network: %d", path, r.Code)
		}
	}
	if r := h.do(t, "GET", "/journal/registration-events", nil); r.Code != 200 {
		t.Errorf("local journal read: %d %s", r.Code, r.Body)
	}
}

func TestReadToken(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.ReadToken, c.AdminToken = "read-tok", "admin-tok" })
	auth := func(tok string) []string { return []string{"RemoteAddr", remote, "Authorization", "Bearer " + tok} }
	if r := h.do(t, "GET", "/journal/registration-events", nil, auth("read-tok")...); r.Code != 200 {
		t.Errorf("read token on the journal: %d", r.Code)
	}
	if r := h.do(t, "GET", "/journal/stats", nil, auth("admin-tok")...); r.Code != 200 {
		t.Errorf("admin token on the journal: %d", r.Code)
	}
	expectError(t, h.do(t, "GET", "/admin/events", nil, auth("read-tok")...), http.StatusUnauthorized)
	expectError(t, h.do(t, "GET", "/journal/stats", nil), http.StatusUnauthorized) // a token is set: localhost needs it too
}

// Issue 10: a replay posted as text/plain ran, so any page open in an operator's
// browser could trigger it (CSRF). POST /registration took text/plain too (see the
// registration package for its own check).
func TestStateChangesDemandJSON(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	body := `{"type":"registration","payload":{"jurisdiction":"mga"}}`
	for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "", "application/jsonx"} {
		for _, path := range []string{"/admin/events/replay", "/admin/events/retry", "/admin/events/" + "7d9f1c2e-0000-4000-8000-000000000001" + "/retry"} {
			r := h.do(t, "POST", path, body, "Content-Type", ct)
			expectError(t, r, http.StatusUnsupportedMediaType)
		}
	}
	if n := len(h.pub.Sent()); n != 0 {
		t.Errorf("%d messages published by refused requests", n)
	}
}

func TestSecurityHeadersAndLimits(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, "GET", "/healthz", nil)
	for _, name := range []string{"X-Content-Type-Options", "X-Frame-Options", "Content-Security-Policy", "Cache-Control", "Referrer-Policy"} {
		if r.Header.Get(name) == "" {
			t.Errorf("%s missing", name)
		}
	}
	srv := h.srv.Echo().Server
	d := httpsec.DefaultLimits
	if srv.ReadHeaderTimeout != d.ReadHeaderTimeout || srv.ReadTimeout != d.ReadTimeout || srv.WriteTimeout != d.WriteTimeout ||
		srv.IdleTimeout != d.IdleTimeout || srv.MaxHeaderBytes != d.MaxHeaderBytes {
		t.Errorf("server limits not set: read-header %v read %v write %v idle %v max-header %d",
			srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.IdleTimeout, srv.MaxHeaderBytes)
	}
}

type fixedWatermarks []journal.Watermark

func (f fixedWatermarks) Watermarks(context.Context) ([]journal.Watermark, error) { return f, nil }

// Issue 10: /journal/stats showed the configured sink URL as it was, credentials included.
func TestStatsRedactsSink(t *testing.T) {
	t.Parallel()
	sink := "webhook-https://feeduser:hunter2@inboxd:8443/changefeed?ca_cert=LS0tLS1CRUdJTi&client_key=c2VjcmV0"
	h := newHarness(t, func(c *Config) {
		c.Watermarks = fixedWatermarks{{Sink: sink, Resolved: "1.0000000000", ResolvedAt: time.Unix(1, 0), UpdatedAt: time.Unix(1, 0)}}
	})
	r := h.do(t, "GET", "/journal/stats", nil)
	if r.Code != 200 {
		t.Fatalf("%d %s", r.Code, r.Body)
	}
	for _, secret := range []string{"hunter2", "LS0tLS1CRUdJTi", "c2VjcmV0"} {
		if strings.Contains(string(r.Body), secret) {
			t.Errorf("stats show %q: %s", secret, r.Body)
		}
	}
}
