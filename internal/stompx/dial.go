package stompx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/inboxd/inboxd/internal/defaults"
)

// ErrUnavailable wraps every error that means "the broker could not be reached or
// dropped the connection"; callers branch on it (the API answers 503).
var ErrUnavailable = errors.New("stomp broker unavailable")

// Defaults for Config's zero values.
const (
	DefaultHeartBeat      = defaults.StompHeartBeat
	DefaultDialTimeout    = 10 * time.Second
	DefaultReceiptTimeout = 10 * time.Second
	// The broker is asked to beat every half interval, and a connection silent for 1.5
	// intervals is dropped: within the two intervals STOMP 1.2 heart-beating allows
	// (https://stomp.github.io/stomp-specification-1.2.html#Heart-beating). ActiveMQ's
	// beats can arrive up to twice their interval apart (its inactivity monitor writes a
	// beat only when a check finds nothing written since the one before), so the read
	// timeout is 1.5 times the widest gap a live broker leaves. go-stomp's read timer is
	// (the broker's interval, at least ours, + HeartBeatError) × the grace multiple, and
	// it sends its own beats HeartBeatError before the interval it promised (go-stomp
	// v3.1.5 conn.go, Connect and processLoop): with half an interval as HeartBeatError,
	// (half + half) × 1.5, and inboxd beats twice as often as ActiveMQ expects.
	heartBeatGraceMultiple = 1.5
)

// Config says how to reach the broker.
type Config struct {
	Addr     string // host:port of the STOMP connector
	Login    string
	Passcode string
	// Host is the STOMP host header: RabbitMQ's virtual host. Empty means
	// Broker.DefaultHost: "/" for RabbitMQ, else the host part of Addr.
	Host string
	// Broker says which broker's dialect to speak; "" or BrokerAuto detects it from the
	// CONNECTED frame's server header (Conn.Dialect).
	Broker Broker
	// HeartBeat is both the send and the expected receive interval; 0 means
	// DefaultHeartBeat, negative disables heart-beats.
	HeartBeat time.Duration
	// DialTimeout bounds TCP connect plus the CONNECT/CONNECTED exchange.
	DialTimeout time.Duration
	// ReceiptTimeout bounds waits for RECEIPT frames (sends, unsubscribe, disconnect).
	ReceiptTimeout time.Duration
	// ClientID is sent as the CONNECT client-id header: the identity a durable topic
	// subscription belongs to. ActiveMQ lets one connection at a time hold a client id
	// (see ErrClientIDInUse). Empty means none, as for queues.
	ClientID string
	Logger   *slog.Logger

	// TLS, when set, speaks TLS to a stomp+ssl connector (see LoadTLS). A failed
	// handshake is an error: there is never a fallback to plaintext.
	TLS *TLS
}

func (c Config) withDefaults() Config {
	if c.HeartBeat == 0 {
		c.HeartBeat = DefaultHeartBeat
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ReceiptTimeout <= 0 {
		c.ReceiptTimeout = DefaultReceiptTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Broker == "" {
		c.Broker = BrokerAuto
	}
	if c.Host == "" {
		c.Host = c.Broker.DefaultHost(c.Addr)
	}
	return c
}

// Conn is a STOMP connection together with its socket, so that its owner can abandon
// it at once: go-stomp's own Disconnect waits for a receipt and MustDisconnect waits
// for a lock a blocked Send holds.
type Conn struct {
	*stomp.Conn
	raw net.Conn
	// Dialect is the broker's: configured, or detected from the CONNECTED frame.
	Dialect Dialect
	// receiptTimeout and heartBeat are the Config's: see bounded.
	receiptTimeout, heartBeat time.Duration
}

// receiptSlack is how much longer go-stomp's own bound on a receipt wait is than
// Config.ReceiptTimeout, inboxd's: inboxd ends every wait itself first (bounded), by
// dropping the connection, and go-stomp's I/O loop then hands the waiter the
// connection's end. When go-stomp's bound ended a wait instead, the wait's channel
// stayed registered, and once the connection closed, that loop blocked forever handing
// it the end: a goroutine and a connection leaked per timed-out receipt (go-stomp
// v3.1.5, conn.go: readReceiptWithTimeout, sendError). The slack is the loop's time to
// see the dropped socket. go-stomp's bound still ends a wait whose frame its loop never
// took (the connection failed first): then nothing is registered, and that goroutine
// ends ReceiptTimeout + receiptSlack after the wait began, in the background (bounded
// has returned by then).
const receiptSlack = 2 * time.Second

// bounded runs wait, a call that waits for a RECEIPT, and drops the connection (Abort)
// if it has not returned within d, which must be at most Config.ReceiptTimeout, or
// before ctx ends; it then returns at once, without waiting for wait: ctx's error if
// ctx ended, else one wrapping ErrUnavailable. When go-stomp's I/O loop had taken the
// frame, wait ends as soon as the loop sees the dropped socket, with nothing left
// registered (see receiptSlack); when the loop had not (it was still writing an earlier
// frame to a broker that stopped reading), nothing delivers the end, and wait lasts
// until go-stomp's own bound, ReceiptTimeout + receiptSlack: a stop must not wait that.
func (c *Conn) bounded(ctx context.Context, d time.Duration, what string, wait func() error) error {
	done := make(chan error, 1)
	go func() { done <- wait() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		c.Abort()
		return ctx.Err()
	case <-t.C:
	}
	c.Abort()
	return fmt.Errorf("%w: no RECEIPT for %s within %s: dropped the connection", ErrUnavailable, what, d)
}

// Barrier waits until the broker has processed every frame sent before it, which
// go-stomp does not wait for (a SUBSCRIBE, an UNSUBSCRIBE): a broker handles one
// connection's frames in order, so a receipt for a later frame (an empty transaction,
// aborted) proves them done. RabbitMQ answers an UNSUBSCRIBE that overtakes its
// SUBSCRIBE with "Subscription not found" (seen under load in CI).
// Bounded by the receipt timeout, and by three quarters of the heart-beat interval:
// go-stomp gives up on this receipt after its heart-beat send interval (at least
// HeartBeat), and would then leave its wait registered (see receiptSlack).
func (c *Conn) Barrier() error {
	d := c.receiptTimeout
	if c.heartBeat > 0 {
		d = min(d, c.heartBeat*3/4)
	}
	return c.bounded(context.Background(), d, "a barrier", func() error {
		tx, err := c.BeginWithError()
		if err == nil {
			err = tx.AbortWithReceipt()
		}
		return err
	})
}

// Abort closes the socket without a DISCONNECT. go-stomp's loops see EOF, fail pending
// receipts and close every subscription channel. The broker redelivers whatever was
// not acknowledged.
func (c *Conn) Abort() {
	// Only the socket: go-stomp's I/O loop then exits and marks the Conn closed itself,
	// whereas MustDisconnect could wait behind a Send blocked on its receipt.
	_ = c.raw.Close()
}

// CloseWithin is Close bounded by d: a broker that does not send the DISCONNECT receipt
// in time (a blackholed path) is abandoned with Abort. For connections whose every
// frame that matters had its own receipt, as a Publisher's sends do.
func (c *Conn) CloseWithin(d time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Close()
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		c.Abort() // the Close under way then fails at once
	}
}

// Close disconnects politely: the DISCONNECT receipt proves that the broker processed
// every frame sent before it (acks included). It falls back to Abort on failure.
//
// The wait for the receipt is bounded by Config.ReceiptTimeout (bounded).
func (c *Conn) Close() error {
	err := c.bounded(context.Background(), c.receiptTimeout, "DISCONNECT", c.Conn.Disconnect)
	_ = c.raw.Close()
	if err != nil {
		return fmt.Errorf("disconnecting from broker: %w", err)
	}
	return nil
}

// Dial connects with STOMP 1.2, login/passcode, heart-beats and the host header. The
// TCP connect and the CONNECT exchange are bounded by ctx and by cfg.DialTimeout.
func Dial(ctx context.Context, cfg Config) (*stomp.Conn, error) {
	c, err := DialConn(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return c.Conn, nil
}

// DialConn is Dial returning the socket too (see Conn). Errors wrap ErrUnavailable.
func DialConn(ctx context.Context, cfg Config) (*Conn, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		c, err := dialOnce(ctx, cfg)
		// ActiveMQ refuses a client id in use with an ERROR frame and closes the socket,
		// but under load it sometimes closes before the frame is written: the client sees
		// EOF. Asking again tells "in use" from "going down" (ErrClientIDInUse drives
		// ingest's standby, so it must not pass for an outage).
		if err == nil || cfg.ClientID == "" || attempt == clientIDAttempts || ctx.Err() != nil || !closedUnanswered(err) {
			return c, err
		}
	}
}

// clientIDAttempts bounds DialConn's re-asks after a CONNECT with a client id that the
// broker closed unanswered.
const clientIDAttempts = 3

// closedUnanswered reports whether the broker closed the socket without a frame.
func closedUnanswered(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

// dialOnce is one TCP connect, TLS handshake and CONNECT exchange, within ctx.
func dialOnce(ctx context.Context, cfg Config) (*Conn, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%w: dialing %s: %w", ErrUnavailable, cfg.Addr, err)
	}
	// stream is what STOMP speaks over; raw stays the socket, so that Abort closes it at
	// once (tls.Conn.Close would first try to send a close_notify).
	stream := raw
	if cfg.TLS != nil {
		tc := tls.Client(raw, cfg.TLS.client(cfg.Addr))
		if err := tc.HandshakeContext(ctx); err != nil {
			_ = raw.Close()
			return nil, cfg.TLS.handshakeError(cfg.Addr, err)
		}
		stream = tc
	}
	// go-stomp only applies the context's deadline to the CONNECTED read; cancelation
	// must unblock it too. It closes the socket: a past deadline set here could be
	// overwritten by go-stomp's own SetReadDeadline (from ctx's deadline, after it wrote
	// CONNECT; go-stomp v3 conn.go, ConnectWithContext), and the dial would then wait
	// for DialTimeout.
	stop := context.AfterFunc(ctx, func() { _ = raw.Close() })
	hb := cfg.HeartBeat
	if hb < 0 {
		hb = 0
	}
	opts := []func(*stomp.Conn) error{
		stomp.ConnOpt.AcceptVersion(stomp.V12),
		stomp.ConnOpt.Host(cfg.Host),
		stomp.ConnOpt.HeartBeat(hb, hb/2),
		stomp.ConnOpt.HeartBeatError(hb / 2),
		stomp.ConnOpt.HeartBeatGracePeriodMultiplier(heartBeatGraceMultiple),
		stomp.ConnOpt.RcvReceiptTimeout(cfg.ReceiptTimeout + receiptSlack),
		stomp.ConnOpt.DisconnectReceiptTimeout(cfg.ReceiptTimeout + receiptSlack),
		stomp.ConnOpt.UnsubscribeReceiptTimeout(cfg.ReceiptTimeout),
		stomp.ConnOpt.Logger(slogAdapter{cfg.Logger.With("component", "stomp")}),
	}
	if cfg.Login != "" || cfg.Passcode != "" {
		opts = append(opts, stomp.ConnOpt.Login(cfg.Login, cfg.Passcode))
	}
	if cfg.ClientID != "" {
		opts = append(opts, stomp.ConnOpt.Header(HeaderClientID, cfg.ClientID))
	}
	sc, err := stomp.ConnectWithContext(ctx, stream, opts...)
	if !stop() {
		// The deadline was set (or is being set); the connection cannot be trusted.
		if sc != nil {
			_ = sc.MustDisconnect()
		}
		_ = raw.Close()
		return nil, fmt.Errorf("%w: connecting to %s: %w", ErrUnavailable, cfg.Addr, context.Cause(ctx))
	}
	if err != nil {
		_ = raw.Close()
		if cfg.ClientID != "" && clientIDInUse(err) {
			return nil, fmt.Errorf("%w: client id %q at %s: %w", ErrClientIDInUse, cfg.ClientID, cfg.Addr, err)
		}
		var op *net.OpError
		if cfg.TLS != nil && errors.As(err, &op) && op.Op == "remote error" {
			// With TLS 1.3 the client's handshake ends before the broker checks the
			// client certificate; its refusal arrives as an alert on the first read.
			return nil, cfg.TLS.handshakeError(cfg.Addr, err)
		}
		if cfg.TLS == nil && errors.Is(err, frame.ErrInvalidCommand) {
			// A stomp+ssl connector answers a plaintext CONNECT with a TLS alert.
			return nil, fmt.Errorf("%w: connecting to %s: the answer is not STOMP (is this a stomp+ssl port? set stomp-tls): %w", ErrUnavailable, cfg.Addr, err)
		}
		return nil, fmt.Errorf("%w: connecting to %s: %w", ErrUnavailable, cfg.Addr, err)
	}
	return &Conn{Conn: sc, raw: raw, Dialect: DialectOf(cfg.Broker, sc.Server()),
		receiptTimeout: cfg.ReceiptTimeout, heartBeat: hb}, nil
}

// slogAdapter routes go-stomp's logging to slog. go-stomp logs an ERROR frame at
// error level; the caller sees the error on its subscription and decides, so it is
// demoted to warning here.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Debugf(f string, v ...any)   { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Infof(f string, v ...any)    { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Warningf(f string, v ...any) { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Errorf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Debug(m string)              { a.l.Debug(m) }
func (a slogAdapter) Info(m string)               { a.l.Debug(m) }
func (a slogAdapter) Warning(m string)            { a.l.Warn(m) }
func (a slogAdapter) Error(m string)              { a.l.Warn(m) }
