package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/inboxd/inboxd/internal/httpsec"
)

// closeGrace bounds the wait for the webhook's connections once its batches are done.
const closeGrace = time.Second

// Path is where the changefeed posts (the path of the sink URL).
const Path = "/changefeed"

// Server serves the changefeed webhook over HTTPS: the journal feed's handler at Path,
// and any extra handlers (the outbox feed's wake-up) beside it.
type Server struct {
	srv *http.Server
	ln  net.Listener
	h   *Handler
}

// Listen binds addr and returns the server for h, with extra routes (path → handler).
func Listen(addr string, tlsConfig *tls.Config, h *Handler, extra map[string]http.Handler) (*Server, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	h.Register(e, Path)
	for path, x := range extra {
		e.POST(path, echo.WrapHandler(x))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for the webhook on %s: %w", addr, err)
	}
	// ErrorLog: every failed TLS handshake is a line, and anyone who can connect can
	// fail one; they go to slog, rate-limited, as the API's do.
	srv := &http.Server{Handler: e, TLSConfig: tlsConfig, ErrorLog: httpsec.ErrorLog(h.log)}
	httpsec.DefaultLimits.Apply(srv)
	return &Server{srv: srv, ln: tls.NewListener(ln, tlsConfig), h: h}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Run serves until ctx ends, then lets requests in flight finish within grace: a batch
// the sink sent is either answered 2xx after its outcome is recorded, or not at all
// (and resent).
func (s *Server) Run(ctx context.Context, grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(s.ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serving the webhook: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	// The batches first: they outlive their requests, and the server waits for the
	// requests that wait for them.
	herr := s.h.Shutdown(sctx)
	// Then the connections. Every batch is answered or cancelled by now, and new posts
	// get 503, so they carry answers being written at most: closeGrace is enough for
	// those. http.Server.Shutdown counts a connection that is still new (handshake
	// done, no request yet, as a client's spare connections are) as busy for its first
	// 5 s; waiting for it spent the whole grace, and with it the overall shutdown
	// budget (TestEndToEndWebhookPath, in a fresh CI run: "shutdown did not finish").
	// Closing such connections loses nothing: the sink resends what it had not sent.
	cctx, ccancel := context.WithTimeout(sctx, closeGrace)
	defer ccancel()
	if err := s.srv.Shutdown(cctx); err != nil {
		s.srv.Close()
		if herr == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		return errors.Join(herr, fmt.Errorf("shutting the webhook down: %w", err))
	}
	return herr
}
