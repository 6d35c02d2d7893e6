package testenv

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CockroachMessageLimit is CockroachDB's default limit on one client message,
// sql.conn.max_read_buffer_message_size (cockroach pkg/sql/pgwire/pgwirebase/encoding.go:
// defaultMaxReadBufferMessageSize = 1 << 24).
const CockroachMessageLimit = 16 << 20

// LimitProxy is a TCP proxy in front of PostgreSQL that refuses, as CockroachDB does,
// any frontend message whose contents exceed a limit: it reads and discards the message
// (CockroachDB "slurps" it, pkg/sql/pgwire/conn.go), answers ErrorResponse SQLSTATE
// 08P01 "message size … bigger than maximum allowed message size …" with CockroachDB's
// hint (pkg/sql/pgwire/pgwirebase/encoding.go, ReadUntypedMsg), reads what the client
// sent up to its Sync, and closes the connection. Every other message passes unchanged,
// whole, so PostgreSQL sees exactly what a client would send to CockroachDB.
type LimitProxy struct {
	Addr    string
	limit   int
	target  string
	ln      net.Listener
	largest atomic.Int64 // the largest frontend message seen, refused or not
	refused atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
}

// StartLimitProxy listens on a free local port and proxies to target (host:port),
// refusing frontend messages larger than limit bytes. It stops when the test ends.
func StartLimitProxy(t testing.TB, target string, limit int) *LimitProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("limit proxy: %v", err)
	}
	p := &LimitProxy{Addr: ln.Addr().String(), limit: limit, target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	acceptLoop(&p.wg, ln, p.track, p.serve)
	t.Cleanup(p.close)
	return p
}

// Largest is the largest frontend message seen so far (its contents, as CockroachDB
// counts them: the length word excluded).
func (p *LimitProxy) Largest() int { return int(p.largest.Load()) }

// Refused is how many messages were refused for their size.
func (p *LimitProxy) Refused() int { return int(p.refused.Load()) }

// ResetLargest forgets the largest message seen so far.
func (p *LimitProxy) ResetLargest() { p.largest.Store(0) }

// NewLimitedDB is NewDB whose Pool connects through a LimitProxy with the given limit
// (migrations run directly). Use CockroachMessageLimit for CockroachDB's default.
func NewLimitedDB(t testing.TB, limit int) (*DB, *LimitProxy) {
	t.Helper()
	db := NewDB(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := StartLimitProxy(t, u.Host, limit)
	u.Host = p.Addr
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		t.Fatalf("connecting through the limit proxy: %v", err)
	}
	t.Cleanup(pool.Close)
	return &DB{URL: u.String(), Pool: pool}, p
}

func (p *LimitProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *LimitProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// Startup request codes answered by one byte instead of a message.
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
)

func (p *LimitProxy) serve(client net.Conn) {
	defer client.Close()
	backend, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(backend) {
		return
	}
	defer backend.Close()
	cr := bufio.NewReaderSize(client, 64<<10)
	br := bufio.NewReaderSize(backend, 64<<10)
	// Startup: untyped messages; an SSL or GSS request is answered with one byte, and
	// only a refusal ('N') lets the plain protocol go on.
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(cr, hdr[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint32(hdr[:4]))
		if n < 8 || n > 10000 {
			return
		}
		msg := make([]byte, n)
		copy(msg, hdr[:])
		if _, err := io.ReadFull(cr, msg[8:]); err != nil {
			return
		}
		if _, err := backend.Write(msg); err != nil {
			return
		}
		code := binary.BigEndian.Uint32(hdr[4:])
		if code != sslRequestCode && code != gssEncRequestCode {
			break
		}
		b, err := br.ReadByte()
		if err != nil || b != 'N' {
			return // encryption is not proxied
		}
		if _, err := client.Write([]byte{b}); err != nil {
			return
		}
	}
	var wmu sync.Mutex // writes to client: whole backend messages, or the refusal
	backendDone := make(chan struct{})
	go func() {
		defer close(backendDone)
		defer client.Close()
		buf := make([]byte, 64<<10)
		for {
			var hdr [5]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return
			}
			n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
			if n < 0 {
				return
			}
			wmu.Lock() // whole messages only, so that a refusal never lands inside one
			_, err := client.Write(hdr[:])
			if err == nil {
				err = copyN(client, br, n, buf)
			}
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	defer func() { backend.Close(); <-backendDone }()
	buf := make([]byte, 64<<10)
	for {
		var hdr [5]byte
		if _, err := io.ReadFull(cr, hdr[:]); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(hdr[1:])) - 4
		if size < 0 {
			return
		}
		for {
			l := p.largest.Load()
			if int64(size) <= l || p.largest.CompareAndSwap(l, int64(size)) {
				break
			}
		}
		if size > p.limit {
			p.refuse(client, cr, hdr[0], size, &wmu)
			return
		}
		if _, err := backend.Write(hdr[:]); err != nil {
			return
		}
		if err := copyN(backend, cr, size, buf); err != nil {
			return
		}
	}
}

// refuse answers a message over the limit as CockroachDB does, then ends the connection
// once the client's pipeline up to its Sync is read (so that closing resets nothing the
// client still has to read).
func (p *LimitProxy) refuse(client net.Conn, cr *bufio.Reader, typ byte, size int, wmu *sync.Mutex) {
	p.refused.Add(1)
	if _, err := io.CopyN(io.Discard, cr, int64(size)); err != nil {
		return
	}
	e := &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "08P01",
		Message: fmt.Sprintf("message size %s bigger than maximum allowed message size %s", iBytes(size), iBytes(p.limit)),
		Hint:    "the maximum message size can be configured using the sql.conn.max_read_buffer_message_size cluster setting"}
	buf, err := e.Encode(nil)
	if err != nil {
		return
	}
	wmu.Lock()
	_, err = client.Write(buf)
	wmu.Unlock()
	if err != nil || typ == 'Q' {
		return
	}
	_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		msg, err := readTyped(cr)
		if err != nil || msg[0] == 'S' {
			return
		}
	}
}

// copyN copies n bytes from r to w through buf, allocating nothing: the proxy runs in
// the test's process, whose allocations some tests measure.
func copyN(w io.Writer, r io.Reader, n int, buf []byte) error {
	for n > 0 {
		k := min(n, len(buf))
		if _, err := io.ReadFull(r, buf[:k]); err != nil {
			return err
		}
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// readTyped reads one typed protocol message: type byte, length, contents.
func readTyped(r *bufio.Reader) ([]byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:])) - 4
	if n < 0 {
		return nil, fmt.Errorf("bad message length %d", n+4)
	}
	msg := make([]byte, 5+n)
	copy(msg, hdr[:])
	_, err := io.ReadFull(r, msg[5:])
	return msg, err
}

// iBytes formats n as CockroachDB's messages do (humanize.IBytes), e.g. "16 MiB".
func iBytes(n int) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := unit, 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	if v < 10 {
		return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[exp])
	}
	return fmt.Sprintf("%.0f %ciB", v, "KMGTPE"[exp])
}

// acceptLoop accepts a test proxy's connections until its listener closes (or track
// refuses one, the proxy closing), and serves each on wg, which the proxy's close waits for.
func acceptLoop(wg *sync.WaitGroup, ln net.Listener, track func(net.Conn) bool, serve func(net.Conn)) {
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !track(c) {
				return
			}
			wg.Go(func() { serve(c) })
		}
	})
}
