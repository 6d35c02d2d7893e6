package stompx

import (
	"bufio"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// stuckBroker accepts connections and, if answer, answers CONNECT, then never sends
// a frame again, like a broker stuck on its store (or, without answer, a wedged one).
// Reached is closed once a client waits on it: for CONNECTED, or for a RECEIPT once
// its SEND came.
func stuckBroker(t *testing.T, answer bool) (addr string, reached <-chan struct{}) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	waits := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() {
				r := bufio.NewReader(c)
				if _, err := r.ReadString(0); err != nil { // the CONNECT frame
					return
				}
				if !answer {
					once.Do(func() { close(waits) })
					_, _ = io.Copy(io.Discard, r)
					return
				}
				if _, err := c.Write([]byte("CONNECTED\nversion:1.2\nheart-beat:0,0\n\n\x00")); err != nil {
					return
				}
				if _, err := r.ReadString(0); err != nil { // the SEND frame
					return
				}
				once.Do(func() { close(waits) })
				_, _ = io.Copy(io.Discard, r)
			})
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String(), waits
}

// Close is bounded whatever the sends in flight wait for (a dial to a silent broker,
// a receipt that does not come): it ends them rather than waiting for their timeouts,
// so that a stop keeps to its budget.
func TestPublisherCloseEndsSendsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer bool
	}{
		{"dialing a broker that does not answer", false},
		{"waiting for a receipt", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, reached := stuckBroker(t, tc.answer)
			p := NewPublisher(Config{Addr: addr, DialTimeout: 5 * time.Second, ReceiptTimeout: 5 * time.Second, HeartBeat: -1}, 1)
			published := make(chan error, 1)
			go func() { published <- p.Publish(context.Background(), "/queue/a", []byte("x"), nil) }()
			<-reached
			start := time.Now()
			if err := p.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("Close took %s with a send in flight, want at most 2s", took)
			}
			select {
			case err := <-published:
				if err == nil {
					t.Error("the send in flight succeeded without a receipt")
				}
			case <-time.After(2 * time.Second):
				t.Error("the send in flight still waits after Close")
			}
		})
	}
}
