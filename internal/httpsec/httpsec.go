// Package httpsec holds the HTTP hardening shared by inboxd's servers (the REST API, the
// changefeed webhook, and any route group mounted beside them): the access rule for
// protected routes, the JSON-only rule for state-changing requests, security headers,
// and the timeouts and size limits of an http.Server.
//
// The access rule: a route group has optional bearer tokens. With a token configured,
// a request must carry one of them, from anywhere. With none configured, the group is
// served to the local machine only: the TCP peer must be a loopback address, the request
// must name a loopback Host (so a DNS-rebinding page cannot reach it through a browser
// on the same machine), and it must carry no forwarding or client-address header
// (Forwarded, Via, X-Forwarded-*, X-Real-IP, CF-Connecting-IP and the like: a reverse
// proxy on the same host would otherwise make every remote client look local). A group
// with RefuseWithoutToken serves nobody until it has a token of its own.
//
// Secrets (bearer tokens, the webhook's Authorization header) are compared by Secret:
// as SHA-256 hashes in constant time, so that neither their bytes nor their length leak
// through timing. No other comparison of secrets exists in inboxd.
package httpsec

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	stdlog "log"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/logx"
)

// Denied is the error the middlewares return; servers render it as they render their
// own errors (the API: {"error": Msg, "detail": Detail}).
type Denied struct {
	Status int
	Msg    string
	Detail string
}

func (d *Denied) Error() string { return fmt.Sprintf("%d %s: %s", d.Status, d.Msg, d.Detail) }

// Guard protects a group of routes.
type Guard struct {
	// Realm names the group in WWW-Authenticate and logs, e.g. "inboxd-admin".
	Realm string
	// EnvVar is the setting that configures the token, named in refusals, e.g. INBOXD_ADMIN_TOKEN.
	EnvVar string
	// Tokens are accepted as "Authorization: Bearer <token>"; empty ones are ignored.
	// With none, only local requests are served (see the package doc).
	Tokens []string
	// RefuseWithoutToken makes a group with no token of its own refuse every request,
	// local ones included. Set it when the server has tokens for other groups: once an
	// operator sets any token, no route that reads or changes data may be served
	// without one.
	RefuseWithoutToken bool
	// Log receives refusals, rate-limited; default: discarded.
	Log *slog.Logger
}

// Middleware returns the guard as Echo middleware, for e.Group(prefix, g.Middleware()) or
// per route.
func (g Guard) Middleware() echo.MiddlewareFunc {
	var secrets []Secret
	for _, t := range g.Tokens {
		if t != "" {
			secrets = append(secrets, NewSecret(t))
		}
	}
	log := g.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	limit := logx.NewLimiter(time.Minute)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if len(secrets) == 0 && g.RefuseWithoutToken {
				if ok, dropped := limit.Allow(g.Realm + " closed"); ok {
					log.Warn("request refused: this route group has no token configured, and other groups have one",
						"realm", g.Realm, "remote", req.RemoteAddr, "refusals_not_logged", dropped)
				}
				return &Denied{Status: http.StatusForbidden, Msg: "forbidden",
					Detail: fmt.Sprintf("%s is not set: with a token configured on the server, these routes are served to nobody without their own token; set %s", g.EnvVar, g.EnvVar)}
			}
			if len(secrets) == 0 {
				if why := notLocal(req); why != "" {
					if ok, dropped := limit.Allow(g.Realm + " local"); ok {
						log.Warn("request refused: no token configured and the request is not local",
							"realm", g.Realm, "why", why, "remote", req.RemoteAddr, "refusals_not_logged", dropped)
					}
					return &Denied{Status: http.StatusForbidden, Msg: "forbidden",
						Detail: fmt.Sprintf("served to localhost only (%s); set %s on the server to allow remote access with a bearer token", why, g.EnvVar)}
				}
				return next(c)
			}
			if bearerMatches(req.Header.Get(echo.HeaderAuthorization), secrets) {
				return next(c)
			}
			if ok, dropped := limit.Allow(g.Realm + " token"); ok {
				log.Warn("request refused: missing or wrong token", "realm", g.Realm, "remote", req.RemoteAddr,
					"had_credentials", req.Header.Get(echo.HeaderAuthorization) != "", "refusals_not_logged", dropped)
			}
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, fmt.Sprintf("Bearer realm=%q", g.Realm))
			return &Denied{Status: http.StatusUnauthorized, Msg: "unauthorized",
				Detail: fmt.Sprintf("send the token configured in %s as an Authorization: Bearer header", g.EnvVar)}
		}
	}
}

// Secret is a secret kept as its SHA-256 hash: Matches compares hashes in constant
// time, so that neither the secret's bytes nor its length leak through timing.
type Secret [sha256.Size]byte

// NewSecret hashes s.
func NewSecret(s string) Secret { return sha256.Sum256([]byte(s)) }

// Matches reports whether got is the secret.
func (s Secret) Matches(got string) bool { return matchesAny(got, s) }

// matchesAny compares got with every secret, each in constant time, never stopping
// early: which one matched does not show either.
func matchesAny(got string, secrets ...Secret) bool {
	sum := sha256.Sum256([]byte(got))
	match := 0
	for _, want := range secrets {
		match |= subtle.ConstantTimeCompare(sum[:], want[:])
	}
	return match == 1
}

// bearerMatches reports whether an Authorization header carries one of the secrets as
// a bearer token.
func bearerMatches(header string, secrets []Secret) bool {
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return matchesAny(strings.TrimSpace(token), secrets...)
}

// forwardingHeader reports whether a header (any case) carries a client's address,
// scheme, port or host as a proxy or CDN relays them: Forwarded (RFC 7239), Via, every
// X-Forwarded-* and the like (X-Original-Forwarded-For), and every "…-IP" or client
// address header (X-Real-IP, X-Client-IP, True-Client-IP, CF-Connecting-IP(v6),
// Fastly-Client-IP, X-Cluster-Client-IP, Client-IP, X-Remote-Addr,
// X-Envoy-External-Address). A list of names would miss the next CDN's; these
// patterns cost a local client nothing, as no client sends such headers of its own.
func forwardingHeader(name string) bool {
	n := strings.ToLower(name)
	switch {
	case n == "via", strings.Contains(n, "forwarded"):
		return true
	case strings.HasSuffix(n, "-ip"), strings.HasSuffix(n, "-ipv6"), n == "client-ip":
		return true
	case strings.HasSuffix(n, "-addr"), strings.HasSuffix(n, "-address"):
		return strings.Contains(n, "client") || strings.Contains(n, "remote") || strings.Contains(n, "external") || strings.Contains(n, "real")
	}
	return false
}

// notLocal says why req does not count as coming from this machine ("" if it does).
func notLocal(req *http.Request) string {
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		host = req.RemoteAddr
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return "the client is not on a loopback address"
	}
	for h := range req.Header { // bounded by the server's MaxHeaderBytes
		if forwardingHeader(h) {
			return "the request came through a proxy (" + h + ")"
		}
	}
	if !IsLoopbackHost(req.Host) {
		return "the Host header does not name localhost"
	}
	return ""
}

// ErrorLog returns the log for http.Server.ErrorLog, where a server writes its own
// errors: failed TLS handshakes, accept errors, a handler's panic. Left nil, each goes
// raw to stderr, a line per failed handshake from anyone who can connect. Here each
// goes to log at WARN, rate-limited as the refusals are (logx.Limiter): one line a
// minute per kind of error, with the number left out since.
func ErrorLog(log *slog.Logger) *stdlog.Logger {
	return stdlog.New(serverErrors{log: log, limit: logx.NewLimiter(time.Minute)}, "", 0)
}

type serverErrors struct {
	log   *slog.Logger
	limit *logx.Limiter
}

func (w serverErrors) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if ok, dropped := w.limit.Allow(errorKind(line)); ok {
		w.log.Warn("http server error", "error", line, "similar_not_logged", dropped)
	}
	return len(p), nil
}

// errorKind is what a server error line says before the client's address or the
// detail: "http: TLS handshake error from 203.0.113.9:5000: EOF" is "TLS handshake error".
func errorKind(line string) string {
	k := strings.TrimPrefix(line, "http: ")
	if i := strings.IndexAny(k, ":[0123456789"); i >= 0 {
		k = k[:i]
	}
	return strings.TrimSuffix(strings.TrimSpace(k), " from")
}

// IsLoopbackHost reports whether hostport ("localhost:8090", "[::1]:8090", "127.0.0.1")
// names this machine.
func IsLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// IsLoopbackAddr reports whether a listen address ("127.0.0.1:8090", "localhost:0")
// accepts local connections only; ":8090" and "0.0.0.0:8090" listen on every interface.
func IsLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return false
	}
	return IsLoopbackHost(host)
}

// unsafeMethods change state; safe ones (GET, HEAD, OPTIONS) must not.
var unsafeMethods = map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

// RequireJSON (route middleware for POST, PUT, PATCH and DELETE routes) answers 415 to a state-changing request whose Content-Type is not
// application/json, body or no body. A browser sends such a request cross-site only
// after a CORS preflight, which inboxd never grants, so a page an operator has open
// cannot forge one (CSRF); text/plain, form and multipart bodies go out without one.
func RequireJSON(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if unsafeMethods[req.Method] {
			mt, _, err := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
			if err != nil || mt != echo.MIMEApplicationJSON {
				return &Denied{Status: http.StatusUnsupportedMediaType, Msg: "unsupported media type",
					Detail: "state-changing requests must have Content-Type: application/json"}
			}
		}
		return next(c)
	}
}

// SecurityHeaders sets headers that keep browsers from sniffing, framing, caching or
// running API responses. A route group serving HTML may override them.
func SecurityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		return next(c)
	}
}

// Limits bound what one client can hold of a server.
type Limits struct {
	ReadHeaderTimeout time.Duration // request line and headers
	ReadTimeout       time.Duration // the whole request, body included: slowly dripped bodies end here
	WriteTimeout      time.Duration // from the end of the headers to the end of the response
	IdleTimeout       time.Duration // an idle keep-alive connection
	MaxHeaderBytes    int
}

// DefaultLimits suit both servers: a webhook batch (≤ 16 MiB) on a LAN takes well under
// ReadTimeout, and WriteTimeout leaves a batch's processing time to spare (the sink's
// own client_timeout is shorter and it resends).
var DefaultLimits = Limits{
	ReadHeaderTimeout: 10 * time.Second,
	ReadTimeout:       60 * time.Second,
	WriteTimeout:      2 * time.Minute,
	IdleTimeout:       60 * time.Second,
	MaxHeaderBytes:    64 << 10,
}

// Apply sets l on s; zero fields of l take DefaultLimits.
func (l Limits) Apply(s *http.Server) {
	d := DefaultLimits
	pick := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	s.ReadHeaderTimeout = pick(l.ReadHeaderTimeout, d.ReadHeaderTimeout)
	s.ReadTimeout = pick(l.ReadTimeout, d.ReadTimeout)
	s.WriteTimeout = pick(l.WriteTimeout, d.WriteTimeout)
	s.IdleTimeout = pick(l.IdleTimeout, d.IdleTimeout)
	s.MaxHeaderBytes = d.MaxHeaderBytes
	if l.MaxHeaderBytes > 0 {
		s.MaxHeaderBytes = l.MaxHeaderBytes
	}
}
