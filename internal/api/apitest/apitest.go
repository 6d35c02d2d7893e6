// Package apitest helps test the REST API and the extensions mounted on it: a fake
// broker publisher, requests served in memory, and the error body's shape.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Published is one message the fake publisher accepted.
type Published struct {
	Destination string
	Body        []byte
	Headers     map[string]string
}

// Publisher stands in for the broker: it records what it is given, or fails.
type Publisher struct {
	mu   sync.Mutex
	msgs []Published
	err  error
}

// Publish records the message, or returns the error set with SetErr.
func (f *Publisher) Publish(ctx context.Context, dest string, body []byte, headers map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.msgs = append(f.msgs, Published{dest, append([]byte(nil), body...), headers})
	return nil
}

// SetErr makes every later Publish fail with err (nil: succeed again).
func (f *Publisher) SetErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Sent returns the messages published so far.
func (f *Publisher) Sent() []Published {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Published(nil), f.msgs...)
}

// Response is a recorded response.
type Response struct {
	Code   int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.Body, err)
	}
}

// Do serves one request with h. body is nil, a string, bytes, or a value sent as JSON.
// The client is local by default, as curl on the server's machine; the pseudo-headers
// "RemoteAddr" and "Host" play another. POSTs and requests with a body are JSON.
func Do(t testing.TB, h http.Handler, method, path string, body any, headers ...string) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, path, rd)
	req.RemoteAddr, req.Host = "127.0.0.1:40000", "localhost:8090"
	if rd != nil || method == http.MethodPost {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(headers); i += 2 {
		switch headers[i] {
		case "RemoteAddr":
			req.RemoteAddr = headers[i+1]
		case "Host":
			req.Host = headers[i+1]
		default:
			req.Header.Set(headers[i], headers[i+1])
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return Response{Code: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()}
}

// ExpectError checks the status and the error body's shape, {"error": …, "detail": …},
// and returns the detail.
func ExpectError(t testing.TB, r Response, status int) any {
	t.Helper()
	if r.Code != status {
		t.Fatalf("status = %d, want %d; body %s", r.Code, status, r.Body)
	}
	var m map[string]any
	r.JSON(t, &m)
	if _, ok := m["error"].(string); !ok {
		t.Fatalf("error body %s has no string \"error\"", r.Body)
	}
	if _, ok := m["detail"]; !ok || len(m) != 2 {
		t.Fatalf("error body %s: want exactly error and detail", r.Body)
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("content type %q", ct)
	}
	return m["detail"]
}
