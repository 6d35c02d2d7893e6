package stompx

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
	"github.com/go-stomp/stomp/v3/server"

	"github.com/inboxd/inboxd/internal/testenv"
)

// silentListener accepts connections and never answers, like a wedged broker.
func silentListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

func TestDialHonorsContextAndTimeout(t *testing.T) {
	addr := silentListener(t)
	tests := []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		timeout time.Duration
	}{
		{"canceled context", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			return ctx, cancel
		}, time.Minute},
		{"dial timeout", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, 150 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			start := time.Now()
			_, err := Dial(ctx, Config{Addr: addr, DialTimeout: tt.timeout})
			if !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Dial = %v, want ErrUnavailable", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("Dial took %s", d)
			}
		})
	}
}

func TestDialActiveMQ(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	conn, err := Dial(context.Background(), Config{Addr: addr, Login: "inboxd", Passcode: "secret"})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Disconnect()
	if conn.Version() != stomp.V12 {
		t.Errorf("version = %s, want 1.2", conn.Version())
	}
}

// TestPublisherReconnects uses go-stomp's in-memory server: the broker is down for the
// first call (ErrUnavailable) and up for the next, which must redial by itself.
func TestPublisherReconnects(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	p := NewPublisher(Config{Addr: addr, DialTimeout: time.Second}, 1)
	defer p.Close()
	ctx := context.Background()
	if err := p.Publish(ctx, "/queue/a", []byte("x"), nil); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Publish with the broker down = %v, want ErrUnavailable", err)
	}

	l, err = net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("port %s taken again: %v", addr, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { _ = server.Serve(l) }()
	if err := p.Publish(ctx, "/queue/a", []byte("x"), map[string]string{"content-type": "application/json"}); err != nil {
		t.Fatalf("Publish after the broker came back: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Publish(ctx, "/queue/a", []byte("x"), nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish after Close = %v, want ErrClosed", err)
	}
}

func TestPublisherActiveMQ(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	q := testenv.Queue(t)
	p := NewPublisher(Config{Addr: addr}, 3)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			errs <- p.Publish(ctx, q, fmt.Appendf(nil, `{"n":%d}`, i), map[string]string{"event-type": "test", "content-type": "application/json"})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}

	conn, err := Dial(ctx, Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Disconnect()
	sub, err := conn.Subscribe(q, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if m.Header.Get("persistent") != "true" || m.Header.Get("event-type") != "test" {
				t.Errorf("headers persistent=%q event-type=%q", m.Header.Get("persistent"), m.Header.Get("event-type"))
			}
			seen[string(m.Body)] = true
		case <-ctx.Done():
			t.Fatalf("received %d of %d messages", len(seen), n)
		}
	}
}

func TestPublishHonorsContext(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	p := NewPublisher(Config{Addr: addr}, 1)
	defer p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Publish(ctx, testenv.Queue(t), []byte("x"), nil); !errors.Is(err, context.Canceled) && !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Publish with a canceled context = %v", err)
	}
}

func TestClientIDInUse(t *testing.T) {
	t.Parallel()
	inUse := frame.New(frame.ERROR, frame.Message, "Broker: inboxd - Client: x already connected from tcp://127.0.0.1:1")
	inUse.Body = []byte("javax.jms.InvalidClientIDException: Broker: inboxd - Client: x already connected")
	other := frame.New(frame.ERROR, frame.Message, "User name [u] or password is invalid.")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"InvalidClientIDException", stomp.Error{Message: inUse.Header.Get(frame.Message), Frame: inUse}, true},
		{"wrapped", fmt.Errorf("connecting: %w", stomp.Error{Message: "x", Frame: inUse}), true},
		{"bad login", stomp.Error{Message: other.Header.Get(frame.Message), Frame: other}, false},
		{"not a stomp error", errors.New("already connected from somewhere"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clientIDInUse(tt.err); got != tt.want {
				t.Errorf("clientIDInUse(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// A second connection with a client id in use is refused with ErrClientIDInUse, as
// ActiveMQ sends ERROR with InvalidClientIDException and closes the socket.
func TestSecondClientIDRefused(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := Config{Addr: addr, ClientID: "inboxd-test-cid-" + testenv.Suffix()}
	inUse, err := ClientIDInUse(ctx, cfg)
	if err != nil || inUse {
		t.Fatalf("ClientIDInUse before = %v, %v; want false", inUse, err)
	}
	first, err := DialConn(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = DialConn(ctx, cfg)
	if !errors.Is(err, ErrClientIDInUse) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("second DialConn = %v, want ErrClientIDInUse (and not ErrUnavailable)", err)
	}
	if inUse, err := ClientIDInUse(ctx, cfg); err != nil || !inUse {
		t.Fatalf("ClientIDInUse while held = %v, %v; want true", inUse, err)
	}
}

// A broker that closes a client-id CONNECT unanswered (ActiveMQ under load, before its
// ERROR frame is written) and answers the next one with InvalidClientIDException: DialConn
// asks again and reports ErrClientIDInUse, not an outage. Without a client id an
// unanswered close is an outage at once.
func TestClientIDRefusalLostThenRepeated(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		clientID string
		want     error
		accepts  int
	}{
		{"client id: asks again", "cid", ErrClientIDInUse, 2},
		{"no client id: outage", "", ErrUnavailable, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			accepted := make(chan int, 4)
			go func() {
				for n := 1; ; n++ {
					c, err := l.Accept()
					if err != nil {
						return
					}
					accepted <- n
					if _, err := frame.NewReader(c).Read(); err != nil {
						c.Close()
						continue
					}
					if n > 1 {
						f := frame.New(frame.ERROR, frame.Message, "Broker: b - Client: cid already connected from tcp://127.0.0.1:1")
						f.Body = []byte("javax.jms.InvalidClientIDException: Broker: b - Client: cid already connected")
						_ = frame.NewWriter(c).Write(f)
					}
					c.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = DialConn(ctx, Config{Addr: l.Addr().String(), ClientID: tt.clientID, HeartBeat: -1})
			if !errors.Is(err, tt.want) {
				t.Fatalf("DialConn = %v, want %v", err, tt.want)
			}
			if tt.want == ErrClientIDInUse && errors.Is(err, ErrUnavailable) {
				t.Fatalf("DialConn = %v, also wraps ErrUnavailable", err)
			}
			if got := len(accepted); got != tt.accepts {
				t.Fatalf("%d connections, want %d", got, tt.accepts)
			}
		})
	}
}

// connectOnlyListener answers CONNECT and then nothing more, like a broker that went
// silent after the handshake: a DISCONNECT receipt never comes.
func connectOnlyListener(t *testing.T) string { return connectedListener(t, true) }

// connectedListener answers CONNECT and then sends nothing; read: it reads (and drops)
// what comes after, or else it reads nothing more, like a broker that hung, whose
// socket buffers fill.
func connectedListener(t *testing.T, read bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				r := frame.NewReader(c)
				if _, err := r.Read(); err != nil {
					return
				}
				connected := frame.New(frame.CONNECTED, frame.Version, "1.2", frame.Server, "ActiveMQ/5.17.6")
				if err := frame.NewWriter(c).Write(connected); err != nil {
					return
				}
				go func() { <-done; c.Close() }()
				if !read {
					<-done
					return
				}
				for {
					if _, err := r.Read(); err != nil {
						return
					}
				}
			})
		}
	})
	return l.Addr().String()
}

// Reachable is the readiness check: bounded by its context through the DISCONNECT too,
// not only the CONNECT. Before, a broker silent after CONNECTED held the check (and a
// /readyz request, and a shutdown waiting for it) for the receipt timeout.
func TestReachableBoundedAfterConnect(t *testing.T) {
	t.Parallel()
	addr := connectOnlyListener(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Reachable(ctx, Config{Addr: addr, ReceiptTimeout: time.Minute})
	if err == nil {
		t.Fatal("Reachable = nil on a broker that never confirms the DISCONNECT")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Reachable took %s past its context's 300ms", took.Round(time.Millisecond))
	}
}

// stuckInSendError counts go-stomp I/O goroutines blocked handing a connection's end to
// a receipt waiter that is gone.
func stuckInSendError() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "go-stomp/stomp/v3.sendError(")
}

// A receipt that never comes is waited for by inboxd, not by go-stomp: when go-stomp's
// own receipt timeout ended a wait, the wait's channel stayed registered, and once the
// connection closed, go-stomp's I/O goroutine blocked forever handing it the error
// (CI: goleak found it after TestClientExportsOneTrace). Bounded by inboxd, the wait
// ends by dropping the connection, and the waiter takes that error.
func TestReceiptTimeoutsLeaveNoGoroutine(t *testing.T) {
	t.Parallel()
	addr := connectOnlyListener(t)
	cfg := Config{Addr: addr, ReceiptTimeout: 200 * time.Millisecond, HeartBeat: -1}
	tests := []struct {
		name string
		wait func(ctx context.Context) error
	}{
		{"publish", func(ctx context.Context) error {
			p := NewPublisher(cfg, 1)
			defer p.Close()
			return p.Publish(ctx, "/queue/x", []byte(`{}`), nil)
		}},
		{"close", func(ctx context.Context) error {
			c, err := DialConn(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			return c.Close()
		}},
		{"barrier", func(ctx context.Context) error {
			c, err := DialConn(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Abort()
			return c.Barrier()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := time.Now()
			if err := tt.wait(ctx); err == nil {
				t.Fatal("nil error from a broker that sends no receipt")
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s, receipt timeout 200ms", took.Round(time.Millisecond))
			}
		})
	}
	testenv.Eventually(t, 10*time.Second, "no go-stomp goroutine blocked in sendError", func() bool {
		return stuckInSendError() == 0
	})
}

// A broker that stops reading: go-stomp's I/O loop blocks writing a large frame, and a
// DISCONNECT queued behind it is never taken, so nothing would hand its wait the
// connection's end. Close returns at its receipt timeout all the same; before, it
// waited go-stomp's own bound too (receipt timeout + receiptSlack), which held
// ingest's stop past its share of the shutdown (CI: TestConsoleInBrowser).
func TestCloseBoundedWhenTheBrokerStopsReading(t *testing.T) {
	t.Parallel()
	const receiptTimeout = 500 * time.Millisecond
	cfg := Config{Addr: connectedListener(t, false), ReceiptTimeout: receiptTimeout, HeartBeat: -1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := DialConn(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// No receipt: Send returns once the frame is queued; the loop then blocks writing it.
	if err := c.Send("/queue/x", "", make([]byte, 32<<20)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = c.Close()
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Close: %v, want ErrUnavailable", err)
	}
	// go-stomp's own bound would be 2.5s; the margin is for a loaded CI machine.
	if took > receiptTimeout+receiptSlack/2 {
		t.Errorf("Close took %s, receipt timeout %s", took.Round(time.Millisecond), receiptTimeout)
	}
}
