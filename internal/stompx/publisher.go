package stompx

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("publisher closed")

// Publisher sends persistent messages and waits for the broker's RECEIPT, so a nil
// error means the broker accepted (and, for persistent messages, stored) the message.
// It uses connections of its own: go-stomp holds a connection-wide lock while it waits
// for a receipt, which would stall a consumer's acks on a shared connection.
//
// It is safe for concurrent use; up to Conns sends are in flight at once. A failed
// connection is dropped and redialed by the next call that needs it.
type Publisher struct {
	cfg   Config
	slots chan *slot
	done  chan struct{}
	once  sync.Once
	// closing ends when Close begins: it ends the sends in flight (a dial, a wait for a
	// receipt), so that Close does not wait out their timeouts.
	closing  context.Context
	closeNow context.CancelFunc
}

type slot struct{ conn *Conn }

// NewPublisher returns a Publisher with conns connections (at least 1), dialed lazily.
func NewPublisher(cfg Config, conns int) *Publisher {
	if conns < 1 {
		conns = 1
	}
	p := &Publisher{cfg: cfg.withDefaults(), slots: make(chan *slot, conns), done: make(chan struct{})}
	p.closing, p.closeNow = context.WithCancel(context.Background())
	for range conns {
		p.slots <- &slot{}
	}
	return p
}

// Publish sends body to destination with persistent:true and the given extra headers
// ("content-type" among them sets the content type), and waits for the RECEIPT.
//
// Errors wrap ErrUnavailable when the broker cannot be reached or the connection fails;
// when ctx ends first the error wraps ctx's error. In both cases the broker may or may
// not have the message: callers retry with the same event id, which the journal
// deduplicates.
func (p *Publisher) Publish(ctx context.Context, destination string, body []byte, headers map[string]string) error {
	var s *slot
	select {
	case s = <-p.slots:
	case <-ctx.Done():
		return fmt.Errorf("waiting for a broker connection: %w", ctx.Err())
	case <-p.done:
		return ErrClosed
	}
	defer func() { p.slots <- s }()
	select {
	case <-p.done:
		return ErrClosed
	default:
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(p.closing, cancel)()

	if s.conn == nil {
		c, err := DialConn(ctx, p.cfg)
		if err != nil {
			if p.closing.Err() != nil {
				return fmt.Errorf("dialing to send to %s: %w", destination, ErrClosed)
			}
			return err
		}
		s.conn = c
	}
	contentType := ""
	opts := []func(*frame.Frame) error{stomp.SendOpt.Receipt, stomp.SendOpt.Header("persistent", "true")}
	for k, v := range headers {
		if k == "content-type" {
			contentType = v
			continue
		}
		opts = append(opts, stomp.SendOpt.Header(k, v))
	}
	conn := s.conn
	err := conn.bounded(ctx, p.cfg.ReceiptTimeout, "a send", func() error {
		return conn.Send(destination, contentType, body, opts...)
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		// The send may or may not complete; bounded dropped the connection.
		s.conn = nil
		if p.closing.Err() != nil {
			err = ErrClosed
		}
		return fmt.Errorf("sending to %s (outcome unknown): %w", destination, err)
	default:
		conn.Abort()
		s.conn = nil
		return fmt.Errorf("%w: sending to %s: %w", ErrUnavailable, destination, err)
	}
}

// Close disconnects every idle connection and makes later calls fail with ErrClosed.
// It ends the sends in flight (their outcome unknown, their error wrapping ErrClosed:
// the caller retries them, deduplicated, after a restart) rather than wait out their
// dial and receipt timeouts, so that it keeps within a stop's budget. A broker that
// does not confirm the DISCONNECT within a second is abandoned: every send had its
// receipt already.
func (p *Publisher) Close() error {
	p.once.Do(func() { close(p.done); p.closeNow() })
	var wg sync.WaitGroup // in parallel: the whole Close waits a second at most
	for range cap(p.slots) {
		s := <-p.slots
		defer func() { p.slots <- s }()
		if c := s.conn; c != nil {
			s.conn = nil
			wg.Go(func() { c.CloseWithin(time.Second) })
		}
	}
	wg.Wait()
	return nil
}
