package testenv

import (
	"net"
	"sync"
	"testing"
)

// FreezeProxy is a TCP proxy that can freeze, or cut. Frozen, it it then stops forwarding in both
// directions without closing anything, as a blackholed network path or a paused VM
// does. The connections stay open and silent, the bytes sent meanwhile wait in the proxy
// and the kernel's buffers, and new connections are accepted but not forwarded. Thaw
// forwards again what waited. Cut is an outage that is seen: every connection is
// closed, and new ones are closed at once, until Restore.
type FreezeProxy struct {
	Addr   string
	target string
	ln     net.Listener

	mu     sync.Mutex
	thawed chan struct{} // closed while forwarding; a fresh one while frozen
	conns  map[net.Conn]struct{}
	closed bool
	cut    bool
	wg     sync.WaitGroup
}

// StartFreezeProxy listens on a free local port and forwards to target (host:port)
// until frozen. It stops when the test ends.
func StartFreezeProxy(t testing.TB, target string) *FreezeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("freeze proxy: %v", err)
	}
	thawed := make(chan struct{})
	close(thawed)
	p := &FreezeProxy{Addr: ln.Addr().String(), target: target, ln: ln, thawed: thawed, conns: map[net.Conn]struct{}{}}
	acceptLoop(&p.wg, ln, p.track, p.serve)
	t.Cleanup(p.close)
	return p
}

// Freeze stops forwarding, at once, on every connection.
func (p *FreezeProxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // already frozen
	}
}

// Thaw forwards again, what waited first.
func (p *FreezeProxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// wait blocks while the proxy is frozen; false once it is closed.
func (p *FreezeProxy) wait() bool {
	for {
		p.mu.Lock()
		ch, closed := p.thawed, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		select {
		case <-ch:
			return true
		default:
		}
		<-ch // Thaw or close closes it
	}
}

// Cut closes every connection and refuses new ones (accepted, then closed) until
// Restore, as a database or broker that is down does.
func (p *FreezeProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Restore ends a Cut.
func (p *FreezeProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *FreezeProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = c.Close()
		return true // the listener goes on
	}
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *FreezeProxy) close() {
	p.mu.Lock()
	p.closed = true
	_ = p.ln.Close()
	for c := range p.conns {
		_ = c.Close()
	}
	select {
	case <-p.thawed:
	default:
		close(p.thawed) // wakes the waiting copies, which see closed
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *FreezeProxy) serve(client net.Conn) {
	if !p.wait() { // accepted while frozen: not forwarded until thawed
		return
	}
	upstream, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = client.Close()
		return
	}
	p.mu.Lock()
	cut := p.cut || p.closed
	if !cut {
		p.conns[upstream] = struct{}{}
	}
	p.mu.Unlock()
	if cut {
		_ = upstream.Close()
		_ = client.Close()
		return
	}
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if !p.wait() {
					return
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go cp(upstream, client)
	go cp(client, upstream)
	<-done
	// One side ended (not a freeze: frozen copies only wait): end both.
	_ = client.Close()
	_ = upstream.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, client)
	delete(p.conns, upstream)
	p.mu.Unlock()
}
