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
	srv := &http.Server{Handler: e, TLSConfig: tlsConfig}
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
	if err := s.srv.Shutdown(sctx); err != nil {
		// http.Server.Shutdown counts a connection that is still new (a TLS handshake
		// under way) as busy for its first 5 s, so a grace shorter than that can end
		// with connections that carry no request. Once every batch is done (herr nil),
		// closing them loses nothing: the sink resends whatever it had not sent.
		s.srv.Close()
		if herr == nil && errors.Is(err, context.DeadlineExceeded) {
			return nil
		}
		return errors.Join(herr, fmt.Errorf("shutting the webhook down: %w", err))
	}
	return herr
}
