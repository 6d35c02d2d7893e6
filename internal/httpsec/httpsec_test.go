package httpsec

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
)

func serve(t *testing.T, g Guard, req *http.Request) int {
	t.Helper()
	e := echo.New()
	e.Use(RequireJSON)
	e.GET("/x", func(c echo.Context) error { return c.String(http.StatusOK, "ok") }, g.Middleware())
	e.POST("/x", func(c echo.Context) error { return c.String(http.StatusOK, "ok") }, g.Middleware())
	e.HTTPErrorHandler = func(err error, c echo.Context) {
		var d *Denied
		if errors.As(err, &d) {
			_ = c.String(d.Status, d.Detail)
			return
		}
		e.DefaultHTTPErrorHandler(err, c)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec.Code
}

// The attacks: a remote client with no token configured, a proxy on the same host, a
// DNS-rebinding page, a wrong token, and a cross-site text/plain POST.
func TestGuard(t *testing.T) {
	req := func(method, remote, host string, headers ...string) *http.Request {
		r := httptest.NewRequest(method, "/x", nil)
		r.RemoteAddr, r.Host = remote, host
		for i := 0; i+1 < len(headers); i += 2 {
			r.Header.Set(headers[i], headers[i+1])
		}
		return r
	}
	open := Guard{Realm: "t", EnvVar: "INBOXD_T_TOKEN"}
	tok := Guard{Realm: "t", EnvVar: "INBOXD_T_TOKEN", Tokens: []string{"", "s3cret", "other"}}
	for _, tc := range []struct {
		name string
		g    Guard
		r    *http.Request
		want int
	}{
		{"no token, loopback", open, req("GET", "127.0.0.1:5000", "localhost:8090"), 200},
		{"no token, ipv6 loopback", open, req("GET", "[::1]:5000", "[::1]:8090"), 200},
		{"no token, remote client", open, req("GET", "203.0.113.9:5000", "inboxd.example:8090"), 403},
		{"no token, remote client naming localhost", open, req("GET", "203.0.113.9:5000", "localhost:8090"), 403},
		{"no token, local proxy", open, req("GET", "127.0.0.1:5000", "localhost", "X-Forwarded-For", "203.0.113.9"), 403},
		{"no token, Forwarded", open, req("GET", "127.0.0.1:5000", "localhost", "Forwarded", "for=203.0.113.9"), 403},
		{"no token, DNS rebinding", open, req("GET", "127.0.0.1:5000", "evil.example:8090"), 403},
		{"token, none sent", tok, req("GET", "127.0.0.1:5000", "localhost"), 401},
		{"token, wrong", tok, req("GET", "203.0.113.9:5000", "x", "Authorization", "Bearer s3cre"), 401},
		{"token, empty bearer", tok, req("GET", "203.0.113.9:5000", "x", "Authorization", "Bearer "), 401},
		{"token, basic scheme", tok, req("GET", "203.0.113.9:5000", "x", "Authorization", "Basic s3cret"), 401},
		{"token, right, remote", tok, req("GET", "203.0.113.9:5000", "x", "Authorization", "Bearer s3cret"), 200},
		{"token, second token", tok, req("GET", "203.0.113.9:5000", "x", "Authorization", "bearer other"), 200},
		{"CSRF text/plain", open, req("POST", "127.0.0.1:5000", "localhost", "Content-Type", "text/plain"), 415},
		{"CSRF form", open, req("POST", "127.0.0.1:5000", "localhost", "Content-Type", "application/x-www-form-urlencoded"), 415},
		{"POST without a content type", open, req("POST", "127.0.0.1:5000", "localhost"), 415},
		{"POST json", open, req("POST", "127.0.0.1:5000", "localhost", "Content-Type", "application/json; charset=utf-8"), 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := serve(t, tc.g, tc.r); got != tc.want {
				t.Errorf("status %d, want %d", got, tc.want)
			}
		})
	}
}

func TestDeniedNamesTheVariable(t *testing.T) {
	e := echo.New()
	c := e.NewContext(httptest.NewRequest("GET", "/", nil), httptest.NewRecorder())
	err := Guard{EnvVar: "INBOXD_READ_TOKEN"}.Middleware()(func(echo.Context) error { return nil })(c)
	var d *Denied
	if !errors.As(err, &d) || !strings.Contains(d.Detail, "INBOXD_READ_TOKEN") {
		t.Fatalf("refusal %v does not name the variable", err)
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8090": true, "localhost:8090": true, "[::1]:1": true,
		":8090": false, "0.0.0.0:8090": false, "10.0.0.1:8090": false, "bogus": false,
	} {
		if got := IsLoopbackAddr(addr); got != want {
			t.Errorf("IsLoopbackAddr(%q) = %v", addr, got)
		}
	}
}

func TestSecurityHeaders(t *testing.T) {
	e := echo.New()
	e.Use(SecurityHeaders)
	e.GET("/", func(c echo.Context) error { return c.JSON(200, "x") })
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	for _, h := range []string{"X-Content-Type-Options", "X-Frame-Options", "Content-Security-Policy", "Cache-Control"} {
		if rec.Header().Get(h) == "" {
			t.Errorf("%s not set", h)
		}
	}
}

// The attack: a body dripped one byte at a time, and an idle keep-alive. The server
// closes both at its limits.
func TestLimitsCloseSlowClients(t *testing.T) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})}
	Limits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}.Apply(srv)
	if srv.WriteTimeout != DefaultLimits.WriteTimeout || srv.MaxHeaderBytes != DefaultLimits.MaxHeaderBytes {
		t.Fatalf("defaults not applied: %+v", srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	closedWithin := func(name string, conn net.Conn, d time.Duration, drip bool) {
		t.Helper()
		deadline := time.Now().Add(d)
		_ = conn.SetReadDeadline(deadline)
		done := make(chan error, 1)
		go func() {
			_, err := io.Copy(io.Discard, conn)
			done <- err
		}()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case err := <-done:
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("%s: connection still open after %v", name, d)
				}
				return
			case <-tick.C:
				if drip {
					_, _ = conn.Write([]byte("x"))
				}
			}
		}
	}

	drip, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer drip.Close()
	_, _ = drip.Write([]byte("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"))
	closedWithin("dripped body", drip, 3*time.Second, true)

	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_, _ = idle.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	if _, err := http.ReadResponse(bufio.NewReader(idle), nil); err != nil {
		t.Fatal(err)
	}
	closedWithin("idle keep-alive", idle, 3*time.Second, false)
}
