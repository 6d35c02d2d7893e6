package stompx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/inboxd/inboxd/internal/testenv"
)

func TestParseBrokerAndDialectOf(t *testing.T) {
	tests := []struct {
		in     string
		server string
		want   Broker
		err    bool
	}{
		{"", "RabbitMQ/3.10.8", BrokerRabbitMQ, false},
		{"auto", "ActiveMQ/5.17.2", BrokerActiveMQ, false},
		{"auto", "", BrokerActiveMQ, false},
		{"RabbitMQ", "ActiveMQ/5.17.2", BrokerRabbitMQ, false}, // configured wins
		{"activemq", "RabbitMQ/3.10.8", BrokerActiveMQ, false},
		{"kafka", "", "", true},
	}
	for _, tt := range tests {
		b, err := ParseBroker(tt.in)
		if (err != nil) != tt.err {
			t.Fatalf("ParseBroker(%q) error = %v, want error %v", tt.in, err, tt.err)
		}
		if err == nil {
			if got := DialectOf(b, tt.server).Broker(); got != tt.want {
				t.Errorf("DialectOf(%q, %q) = %s, want %s", b, tt.server, got, tt.want)
			}
		}
	}
	if h := BrokerRabbitMQ.DefaultHost("10.0.0.1:61613"); h != "/" {
		t.Errorf("RabbitMQ's default host = %q, want /", h)
	}
	if h := BrokerAuto.DefaultHost("10.0.0.1:61613"); h != "10.0.0.1" {
		t.Errorf("auto's default host = %q, want the address's host (today's behaviour)", h)
	}
}

func TestSubscribeHeaders(t *testing.T) {
	has := func(f *frame.Frame, k string) bool { _, ok := f.Header.Contains(k); return ok }
	get := func(d Dialect, dur *Durable) *frame.Frame {
		f := frame.New("SUBSCRIBE")
		for _, o := range d.SubscribeHeaders(500, dur) {
			if err := o(f); err != nil {
				t.Fatal(err)
			}
		}
		return f
	}
	dur := &Durable{ClientID: "inboxd.orders", Name: "inboxd"}
	a := get(ActiveMQ, dur)
	if a.Header.Get("activemq.prefetchSize") != "500" || a.Header.Get(HeaderSubscriptionName) != "inboxd" || has(a, "prefetch-count") {
		t.Errorf("ActiveMQ SUBSCRIBE headers: %v", a.Header)
	}
	r := get(RabbitMQ, dur)
	if r.Header.Get("prefetch-count") != "500" || r.Header.Get("durable") != "true" || r.Header.Get("auto-delete") != "false" ||
		r.Header.Get("id") != "inboxd.orders/inboxd" || has(r, "activemq.prefetchSize") {
		t.Errorf("RabbitMQ SUBSCRIBE headers: %v", r.Header)
	}
	if q := get(RabbitMQ, nil); has(q, "durable") || has(q, "id") {
		t.Errorf("RabbitMQ queue SUBSCRIBE headers: %v", q.Header)
	}
}

// TestRabbitMQConnects is the finding: with the broker's address as the host
// header (inboxd's only behaviour before), RabbitMQ refuses the CONNECT ("Virtual host
// '127.0.0.1' access denied"). With broker rabbitmq the host defaults to "/", an
// explicit host is sent as it is, the dialect is detected from CONNECTED, and a wrong
// passcode is refused.
func TestRabbitMQConnects(t *testing.T) {
	r := testenv.Rabbit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	base := Config{Addr: r.Addr, Login: r.Login, Passcode: r.Passcode, HeartBeat: -1}

	if _, err := DialConn(ctx, base); err == nil {
		t.Fatal("auto with the address as host header connected to RabbitMQ; want its refusal of virtual host 127.0.0.1")
	}
	for _, cfg := range []Config{
		func() Config { c := base; c.Broker = BrokerRabbitMQ; return c }(),
		func() Config { c := base; c.Host = "/"; return c }(), // auto, host set: detected
	} {
		c, err := DialConn(ctx, cfg)
		if err != nil {
			t.Fatalf("broker %q host %q: %v", cfg.Broker, cfg.Host, err)
		}
		if c.Dialect != RabbitMQ || !strings.HasPrefix(c.Server(), "RabbitMQ/") {
			t.Errorf("dialect %s (server %q), want rabbitmq", c.Dialect, c.Server())
		}
		_ = c.Close()
	}
	bad := base
	bad.Broker, bad.Passcode = BrokerRabbitMQ, "wrong"
	if _, err := DialConn(ctx, bad); err == nil {
		t.Error("a wrong passcode connected")
	}
}

// TestRabbitMQSemantics checks on the RabbitMQ node what inboxd relies on: a SEND with
// persistent:true and a receipt is confirmed (the plugin sends the RECEIPT after the
// broker's publisher confirm), the MESSAGE carries persistent:true and a message-id,
// prefetch-count bounds what is pushed unacked, and a message unacked when its
// connection ends comes back with redelivered:true.
func TestRabbitMQSemantics(t *testing.T) {
	r := testenv.Rabbit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Addr: r.Addr, Login: r.Login, Passcode: r.Passcode, Broker: BrokerRabbitMQ}
	q := testenv.Queue(t)
	p := NewPublisher(cfg, 1)
	defer p.Close()
	for i := range 5 {
		if err := p.Publish(ctx, q, []byte{byte('a' + i)}, map[string]string{"content-type": "text/plain"}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	c1, err := DialConn(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := c1.Subscribe(q, stomp.AckClientIndividual, c1.Dialect.SubscribeHeaders(2, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	var first *stomp.Message
	for range 2 {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if m.Header.Get("persistent") != "true" || m.Header.Get("message-id") == "" || m.Header.Get("redelivered") == "true" {
				t.Errorf("first delivery headers: %v", m.Header)
			}
			if first == nil {
				first = m
			}
		case <-ctx.Done():
			t.Fatal("no message")
		}
	}
	select { // prefetch-count 2: nothing more until an ack
	case m := <-sub.C:
		t.Fatalf("a third message (%q) arrived with prefetch-count 2 and nothing acked", m.Body)
	case <-time.After(300 * time.Millisecond):
	}
	c1.Abort() // nothing acked: all five stay the broker's

	c2, err := DialConn(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	sub2, err := c2.Subscribe(q, stomp.AckAuto, c2.Dialect.SubscribeHeaders(10, nil)...)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub2.C:
		if m.Err != nil {
			t.Fatal(m.Err)
		}
		if string(m.Body) != string(first.Body) || m.Header.Get("redelivered") != "true" {
			t.Errorf("after the abort, got %q redelivered=%q; want %q redelivered=true", m.Body, m.Header.Get("redelivered"), first.Body)
		}
	case <-ctx.Done():
		t.Fatal("nothing redelivered")
	}
}

// TestRabbitMQDurableSubscription: a durable topic subscription (durable:true,
// auto-delete:false, a stable id) keeps what is published while nothing is attached,
// and RemoveDurable deletes it with what it held.
func TestRabbitMQDurableSubscription(t *testing.T) {
	r := testenv.Rabbit(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{Addr: r.Addr, Login: r.Login, Passcode: r.Passcode, Broker: BrokerRabbitMQ, ClientID: "inboxd-test-" + testenv.Suffix()}
	topic := "/topic/inboxd-test.durable." + testenv.Suffix()
	dur := Durable{ClientID: cfg.ClientID, Name: "inboxd"}
	attach := func() (*Conn, *stomp.Subscription) {
		t.Helper()
		c, err := DialConn(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := c.Subscribe(topic, stomp.AckClientIndividual, c.Dialect.SubscribeHeaders(10, &dur)...)
		if err != nil {
			t.Fatal(err)
		}
		// A receipt for a later frame proves the SUBSCRIBE (and its queue) happened.
		tx, err := c.BeginWithError()
		if err == nil {
			err = tx.AbortWithReceipt()
		}
		if err != nil {
			t.Fatal(err)
		}
		return c, sub
	}
	c, _ := attach()
	_ = c.Close() // detached: the subscription stays
	p := NewPublisher(cfg, 1)
	defer p.Close()
	for i := range 3 {
		if err := p.Publish(ctx, topic, []byte{byte('0' + i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c, sub := attach()
	for i := range 3 {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 3 messages published while detached arrived", i)
		}
	}
	c.Abort() // nothing acked: the three stay the subscription's

	if err := RemoveDurable(ctx, cfg, dur.Name, topic); err != nil {
		t.Fatalf("RemoveDurable: %v", err)
	}
	c, sub = attach() // a new, empty subscription of the same id
	select {
	case m := <-sub.C:
		t.Fatalf("after RemoveDurable, a message (%q) was still held", m.Body)
	case <-time.After(500 * time.Millisecond):
	}
	_ = c.Close()
	if err := RemoveDurable(ctx, cfg, dur.Name, topic); err != nil {
		t.Errorf("removing the test's subscription: %v", err)
	}
	if inUse, err := ClientIDInUse(ctx, cfg); !errors.Is(err, ErrNoClientIDs) || inUse {
		t.Errorf("ClientIDInUse on RabbitMQ = %v, %v; want ErrNoClientIDs", inUse, err)
	}
}
