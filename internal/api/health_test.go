package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestHealthAndReady(t *testing.T) {
	t.Parallel()
	brokerErr := errors.New("dial tcp 127.0.0.1:61613: connection refused")
	var brokerDown bool
	h := newHarness(t, func(c *Config) {
		c.Ready = []ReadyCheck{{Name: "broker", Check: func(ctx context.Context) error {
			if brokerDown {
				return brokerErr
			}
			return nil
		}}}
	})
	if r := h.do(t, "GET", "/healthz", nil); r.Code != 200 {
		t.Errorf("healthz %d", r.Code)
	}
	r := h.do(t, "GET", "/readyz", nil)
	var ready readyResponse
	r.JSON(t, &ready)
	if r.Code != 200 || ready.Checks["database"] != "ok" || ready.Checks["broker"] != "ok" {
		t.Errorf("readyz: %d %s", r.Code, r.Body)
	}
	brokerDown = true
	r = h.do(t, "GET", "/readyz", nil)
	detail := expectError(t, r, 503)
	var e Error
	r.JSON(t, &e)
	if !strings.Contains(e.Error, "broker") || strings.Contains(e.Error, "database") {
		t.Errorf("503 should name the broker only: %s", r.Body)
	}
	// The cause stays in the log: /readyz needs no token, and errors name hosts and users.
	if d, _ := detail.(map[string]any); d["database"] != "ok" || d["broker"] != "failed" {
		t.Errorf("detail %v", detail)
	}
	if strings.Contains(string(r.Body), brokerErr.Error()) {
		t.Errorf("readyz leaks the check's error: %s", r.Body)
	}

	// A database that does not answer.
	h.db.Pool.Close()
	r = h.do(t, "GET", "/readyz", nil)
	expectError(t, r, 503)
	r.JSON(t, &e)
	if !strings.Contains(e.Error, "database") {
		t.Errorf("503 should name the database: %s", r.Body)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	r := h.do(t, "GET", "/metrics", nil)
	if r.Code != 200 || !strings.Contains(string(r.Body), "go_goroutines") {
		t.Errorf("metrics: %d", r.Code)
	}
}

func TestServeShutsDownGracefully(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *Config) { c.ShutdownTimeout = 5 * time.Second })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Serve(ctx, ln) }()
	url := fmt.Sprintf("http://%s/healthz", ln.Addr())
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "ok") {
		t.Errorf("healthz over TCP: %d %s", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v after shutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after ctx was canceled")
	}
	if _, err := http.Get(url); err == nil {
		t.Error("still serving after shutdown")
	}
}
