package api

import (
	"net/http"
	"strings"
	"testing"
)

// forwardingHeaders are the headers a proxy or CDN sets to carry the client's address,
// scheme, port or host (issue 28, item 2).
var forwardingHeaders = []string{
	"Forwarded", "Via", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port",
	"X-Forwarded-Server", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Fastly-Client-Ip",
	"X-Cluster-Client-Ip",
}

// guardedRoutes read or change data; one of each kind of access.
var guardedRoutes = []struct{ method, path string }{
	{"GET", "/admin/events"},
	{"GET", "/admin/quarantine/7d9f1c2e-0000-4000-8000-000000000001/body"},
	{"POST", "/admin/events/replay"},
	{"POST", "/admin/events/7d9f1c2e-0000-4000-8000-000000000001/retry"},
	{"GET", "/admin/feed"},
	{"GET", "/journal/stats"},
	{"GET", "/journal/registration-events?email=alice@example.com"},
}

// Issue 28, item 2: a hostile client on the network, relayed by a proxy on the same
// host to 127.0.0.1 with no token set, got 200 on /admin/events with
// X-Forwarded-Proto, X-Forwarded-Port, X-Forwarded-Server, True-Client-IP,
// CF-Connecting-IP or X-Client-IP. Every header, alone and all together: 403.
func TestHostileClientBehindLocalProxy(t *testing.T) {
	h := newHarness(t, nil)
	for _, rt := range guardedRoutes {
		for _, hdr := range forwardingHeaders {
			r := h.do(t, rt.method, rt.path, `{"type":"registration","dry_run":true}`, hdr, "203.0.113.7")
			if r.Code != http.StatusForbidden {
				t.Errorf("%s %s with %s, no token set: %d, want 403", rt.method, rt.path, hdr, r.Code)
			}
		}
		var all []string
		for _, hdr := range forwardingHeaders {
			all = append(all, hdr, "203.0.113.7")
		}
		if r := h.do(t, rt.method, rt.path, `{}`, all...); r.Code != http.StatusForbidden {
			t.Errorf("%s %s with every forwarding header: %d, want 403", rt.method, rt.path, r.Code)
		}
	}
	if n := len(h.pub.Sent()); n != 0 {
		t.Errorf("%d messages published by refused requests", n)
	}
}

// Issue 28, item 3: with INBOXD_READ_TOKEN alone set, a local client without a token
// got 401 on /journal but 200 on /admin/events and the quarantine bodies, and could run
// every admin action. Once any token is set, no route that reads or changes data is
// served without one; the admin routes need the admin token, which is not configured,
// so they are refused to everyone (the read token does not open them).
func TestReadTokenAloneClosesAdmin(t *testing.T) {
	h := newHarness(t, func(c *Config) { c.ReadToken = "read-tok" })
	for _, rt := range guardedRoutes {
		for _, auth := range []string{"", "Bearer read-tok", "Bearer admin-tok"} {
			var headers []string
			if auth != "" {
				headers = []string{"Authorization", auth}
			}
			r := h.do(t, rt.method, rt.path, `{"type":"registration","dry_run":true}`, headers...)
			journalRead := strings.HasPrefix(rt.path, "/journal/")
			switch {
			case journalRead && auth == "Bearer read-tok":
				if r.Code != http.StatusOK {
					t.Errorf("%s %s with the read token: %d %s, want 200", rt.method, rt.path, r.Code, r.Body)
				}
			case r.Code != http.StatusUnauthorized && r.Code != http.StatusForbidden:
				t.Errorf("%s %s from localhost, read token set, %q: %d, want 401 or 403", rt.method, rt.path, auth, r.Code)
			case !journalRead && !strings.Contains(string(r.Body), "INBOXD_ADMIN_TOKEN"):
				t.Errorf("%s %s: refusal %s does not name INBOXD_ADMIN_TOKEN", rt.method, rt.path, r.Body)
			}
		}
	}
	if n := len(h.pub.Sent()); n != 0 {
		t.Errorf("%d messages published by refused requests", n)
	}
	if !strings.Contains(h.log.String(), "INBOXD_ADMIN_TOKEN") {
		t.Errorf("start logs do not say the admin routes are closed:\n%s", h.log.String())
	}
}
