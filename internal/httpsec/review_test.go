package httpsec

import (
	"go/parser"
	"go/token"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// forwardingHeaders are the headers proxies and CDNs set to carry the client's address,
// scheme, port or host (issue 28, item 2): each one means the TCP peer is a proxy.
var forwardingHeaders = []string{
	"Forwarded", "Via",
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Forwarded-Server",
	"X-Forwarded-Prefix", "X-Forwarded-Ssl", "X-Forwarded-Scheme", "X-Forwarded", "X-Original-Forwarded-For",
	"X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "Cf-Connecting-Ip", "Cf-Connecting-Ipv6", "Fastly-Client-Ip",
	"X-Cluster-Client-Ip", "Client-Ip", "X-Originating-Ip", "X-Remote-Ip", "X-Remote-Addr", "X-Proxyuser-Ip",
	"X-Envoy-External-Address",
}

// Issue 28, item 2: with no token set, a loopback request counted as local unless it
// carried one of five proxy headers; X-Forwarded-Proto (what nginx's proxy_pass to
// 127.0.0.1 sends), True-Client-Ip, Cf-Connecting-Ip or X-Client-Ip got 200 on
// /admin/events. A hostile client sends every header, alone and all together.
func TestForwardingHeadersAreNotLocal(t *testing.T) {
	open := Guard{Realm: "t", EnvVar: "INBOXD_T_TOKEN"}
	local := func(headers ...string) *http.Request {
		r := httptest.NewRequest("GET", "/x", nil)
		r.RemoteAddr, r.Host = "127.0.0.1:5000", "localhost:8090"
		for _, h := range headers {
			r.Header.Set(h, "203.0.113.9")
		}
		return r
	}
	if got := serve(t, open, local()); got != http.StatusOK {
		t.Fatalf("a plain local request: %d, want 200", got)
	}
	for _, h := range forwardingHeaders {
		if got := serve(t, open, local(h)); got != http.StatusForbidden {
			t.Errorf("%s alone: %d, want 403", h, got)
		}
		// Another spelling of the name: Go canonicalises what it parses off the wire,
		// but a handler may see a map filled by hand.
		r := local()
		r.Header[strings.ToLower(h)] = []string{"203.0.113.9"}
		if got := serve(t, open, r); got != http.StatusForbidden {
			t.Errorf("%s in lower case: %d, want 403", h, got)
		}
	}
	if got := serve(t, open, local(forwardingHeaders...)); got != http.StatusForbidden {
		t.Errorf("every forwarding header together: %d, want 403", got)
	}
	for i := range forwardingHeaders {
		pair := []string{forwardingHeaders[i], forwardingHeaders[(i+7)%len(forwardingHeaders)]}
		if got := serve(t, open, local(pair...)); got != http.StatusForbidden {
			t.Errorf("%v: %d, want 403", pair, got)
		}
	}
	// Headers that say nothing about the client stay local.
	for _, h := range []string{"User-Agent", "Accept", "X-Request-Id", "X-Ipsum"} {
		if got := serve(t, open, local(h)); got != http.StatusOK {
			t.Errorf("%s: %d, want 200", h, got)
		}
	}
}

// Issue 28, item 3: with a read token only, the admin group (no token of its own) kept
// serving local clients without any token. A group that must refuse without a token
// of its own does so, locally too, and names the variable to set.
func TestRefuseWithoutToken(t *testing.T) {
	g := Guard{Realm: "t", EnvVar: "INBOXD_T_TOKEN", RefuseWithoutToken: true}
	r := httptest.NewRequest("GET", "/x", nil)
	r.RemoteAddr, r.Host = "127.0.0.1:5000", "localhost:8090"
	if got := serve(t, g, r); got != http.StatusForbidden {
		t.Errorf("local request, group without a token: %d, want 403", got)
	}
	r.Header.Set("Authorization", "Bearer anything")
	if got := serve(t, g, r); got != http.StatusForbidden {
		t.Errorf("local request with some token, group without a token: %d, want 403", got)
	}
	g.Tokens = []string{"s3cret"}
	r.Header.Set("Authorization", "Bearer s3cret")
	if got := serve(t, g, r); got != http.StatusOK {
		t.Errorf("the group's own token: %d, want 200", got)
	}
}

// Issue 28, item 7: the outbox webhook compared the raw Authorization header with
// subtle.ConstantTimeCompare, which returns at once on a length mismatch: the token's
// length leaked. Every secret is compared by Secret.Matches (hashes, constant time):
// no other package may compare bytes with crypto/subtle.
func TestOneSecretComparison(t *testing.T) {
	root := filepath.Join("..", "..")
	var offenders []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		if filepath.Dir(path) == filepath.Join(root, "internal", "httpsec") { // where Secret lives
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "crypto/subtle" {
				offenders = append(offenders, path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(offenders) > 0 {
		t.Errorf("compare secrets with httpsec.Secret (hashed, constant time), not crypto/subtle: %v", offenders)
	}
}

// Issue 28, item 4: a server's own error lines go to slog at WARN, one a minute per
// kind, whatever the client's address.
func TestErrorLogRateLimited(t *testing.T) {
	var buf strings.Builder
	l := ErrorLog(slog.New(slog.NewTextHandler(&buf, nil)))
	for i := range 100 {
		l.Printf("http: TLS handshake error from 203.0.113.%d:%d: EOF", i, 40000+i)
		l.Printf("http: TLS handshake error from [2001:db8::%d]:443: tls: unknown certificate", i)
	}
	l.Printf("http: Accept error: accept tcp: too many open files; retrying in 5ms")
	out := buf.String()
	if n := strings.Count(out, "level=WARN"); n != 2 {
		t.Errorf("%d lines for 201 errors of two kinds, want 2:\n%s", n, out)
	}
	for _, want := range []string{"TLS handshake error from 203.0.113.0:40000", "Accept error"} {
		if !strings.Contains(out, want) {
			t.Errorf("log does not show %q:\n%s", want, out)
		}
	}
}
