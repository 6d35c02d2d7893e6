package api

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// receiptPublisher is a minimal real Publisher for this test: a persistent SEND with a
// receipt, on a connection of its own (internal/stompx is the production one).
type receiptPublisher struct {
	mu   sync.Mutex
	conn *stomp.Conn
}

func (p *receiptPublisher) Publish(ctx context.Context, dest string, body []byte, headers map[string]string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	opts := []func(*frame.Frame) error{stomp.SendOpt.Receipt, stomp.SendOpt.Header("persistent", "true")}
	for k, v := range headers {
		if k != HeaderContentType {
			opts = append(opts, stomp.SendOpt.Header(k, v))
		}
	}
	return p.conn.Send(dest, headers[HeaderContentType], body, opts...)
}

func dialBroker(t *testing.T, addr string) *stomp.Conn {
	t.Helper()
	conn, err := stomp.Dial("tcp", addr, stomp.ConnOpt.HeartBeat(0, 0))
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Disconnect() })
	return conn
}

// TestPostRegistrationOverRealBroker posts a registration and reads the message back
// from ActiveMQ: persistent, with the event-type header, decodable by ingest. It runs
// with the production publisher (internal/stompx) and with the minimal one above.
func TestPostRegistrationOverRealBroker(t *testing.T) {
	addr := testenv.Broker(t)
	publishers := map[string]func(t *testing.T) Publisher{
		"stompx": func(t *testing.T) Publisher {
			p := stompx.NewPublisher(stompx.Config{Addr: addr}, 2)
			t.Cleanup(func() { _ = p.Close() })
			return p
		},
		"go-stomp": func(t *testing.T) Publisher { return &receiptPublisher{conn: dialBroker(t, addr)} },
	}
	for name, newPublisher := range publishers {
		t.Run(name, func(t *testing.T) { testPostOverBroker(t, addr, newPublisher(t)) })
	}
}

func testPostOverBroker(t *testing.T, addr string, pub Publisher) {
	queue := testenv.Queue(t)
	h := newHarness(t, func(c *Config) {
		c.Publisher = pub
		c.Destination = queue
	})
	sub, err := dialBroker(t, addr).Subscribe(queue, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}

	var form map[string]any
	h.do(t, "GET", "/registration/form", nil).json(t, &form)
	r := h.do(t, "POST", "/registration", form)
	if r.Code != http.StatusAccepted {
		t.Fatalf("post: %d %s", r.Code, r.Body)
	}
	var acc acceptedResponse
	r.json(t, &acc)

	select {
	case msg := <-sub.C:
		if msg.Err != nil {
			t.Fatal(msg.Err)
		}
		if got := msg.Header.Get(message.HeaderEventType); got != "registration" {
			t.Errorf("event-type header %q", got)
		}
		if got := msg.Header.Get("persistent"); got != "true" {
			t.Errorf("persistent header %q", got)
		}
		if msg.ContentType != "application/json" {
			t.Errorf("content type %q", msg.ContentType)
		}
		ev, err := message.Decode(msg.Body, msg.Header.Get, message.Options{})
		if err != nil {
			t.Fatalf("ingest would quarantine it: %v", err)
		}
		if ev.ID != acc.ID || ev.EventType != "registration" || ev.AggregateID != "mga:"+form["email"].(string) {
			t.Errorf("event %+v", ev)
		}
		var p map[string]any
		if err := json.Unmarshal(msg.Body, &p); err != nil || p["name"] != form["name"] {
			t.Errorf("payload %s", msg.Body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no message on the queue within 10s")
	}
}

// TestPostRegistrationBrokerUnreachable: stompx cannot dial (nothing listens on the
// port), so the API answers 503 rather than accepting a message it could lose.
func TestPostRegistrationBrokerUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	pub := stompx.NewPublisher(stompx.Config{Addr: addr, DialTimeout: 2 * time.Second}, 1)
	t.Cleanup(func() { _ = pub.Close() })
	h := newHarness(t, func(c *Config) { c.Publisher = pub })
	var form map[string]any
	h.do(t, "GET", "/registration/form", nil).json(t, &form)
	expectError(t, h.do(t, "POST", "/registration", form), http.StatusServiceUnavailable)
}

// TestPostRegistrationBrokerGone: a publisher whose connection is closed answers 503.
func TestPostRegistrationBrokerGone(t *testing.T) {
	addr := testenv.Broker(t)
	conn, err := stomp.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Disconnect()
	h := newHarness(t, func(c *Config) {
		c.Publisher = &receiptPublisher{conn: conn}
		c.Destination = testenv.Queue(t)
	})
	var form map[string]any
	h.do(t, "GET", "/registration/form", nil).json(t, &form)
	expectError(t, h.do(t, "POST", "/registration", form), http.StatusServiceUnavailable)
}
