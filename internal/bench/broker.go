package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/inboxd/inboxd/internal/stompx"
)

// target is the broker this process benchmarks, set once by setBroker from -broker
// (in the parent, and in each row's child) before anything connects.
var target = struct {
	broker          stompx.Broker
	login, passcode string
}{broker: stompx.BrokerActiveMQ}

// setBroker selects the broker: "activemq" (no login) or "rabbitmq" (its STOMP plugin,
// as guest unless INBOXD_STOMP_LOGIN and INBOXD_STOMP_PASSCODE say otherwise).
func setBroker(name string) error {
	b, err := stompx.ParseBroker(name)
	if err != nil || b == stompx.BrokerAuto {
		return fmt.Errorf("-broker %q: want activemq or rabbitmq", name)
	}
	target.broker, target.login, target.passcode = b, "", ""
	if b == stompx.BrokerRabbitMQ {
		target.login, target.passcode = envOr("INBOXD_STOMP_LOGIN", "guest"), envOr("INBOXD_STOMP_PASSCODE", "guest")
	}
	return nil
}

// defaultStompAddr is where each broker listens here: ActiveMQ's 61613 and the private
// RabbitMQ node's 61623 (scripts/services.sh).
func defaultStompAddr(broker string) string {
	if stompx.Broker(broker) == stompx.BrokerRabbitMQ {
		return "127.0.0.1:61623"
	}
	return "127.0.0.1:61613"
}

// prefetch is the SUBSCRIBE header that bounds unacked messages, in the broker's dialect.
func prefetch(n int) []func(*frame.Frame) error {
	return stompx.DialectOf(target.broker, "").SubscribeHeaders(n, nil)
}

// dial opens a STOMP connection with heart-beats loose enough for a busy 2-core host.
// The host header "/" is RabbitMQ's default virtual host, and ActiveMQ ignores it.
func dial(ctx context.Context, addr string) (*stomp.Conn, error) {
	opts := []func(*stomp.Conn) error{
		stomp.ConnOpt.HeartBeat(30*time.Second, 30*time.Second),
		stomp.ConnOpt.HeartBeatGracePeriodMultiplier(2),
		stomp.ConnOpt.Host("/"),
		stomp.ConnOpt.Logger(quietLogger{})}
	if target.login != "" {
		opts = append(opts, stomp.ConnOpt.Login(target.login, target.passcode))
	}
	conn, err := stomp.DialWithContext(ctx, "tcp", addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connecting to stomp at %s: %w", addr, err)
	}
	return conn, nil
}

// receiptEvery bounds how far the publisher runs ahead of the broker: every so many
// sends wait for a receipt, which ActiveMQ sends only after the earlier sends on the
// connection are stored.
const receiptEvery = 2000

// publish sends bodies to queue as persistent messages and returns once the broker has
// stored all of them (the last send carries a receipt).
func publish(ctx context.Context, addr, queue string, bodies [][]byte) error {
	conn, err := dial(ctx, addr)
	if err != nil {
		return err
	}
	defer conn.Disconnect()
	for i, b := range bodies {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := send(conn, queue, b, (i+1)%receiptEvery == 0 || i == len(bodies)-1); err != nil {
			return fmt.Errorf("publishing message %d of %d to %s: %w", i+1, len(bodies), queue, err)
		}
	}
	return nil
}

func send(conn *stomp.Conn, queue string, body []byte, receipt bool) error {
	opts := []func(*frame.Frame) error{stomp.SendOpt.Header("persistent", "true")}
	if tracedPublish.Load() {
		opts = append(opts, stomp.SendOpt.Header("traceparent", traceparent()))
	}
	if receipt {
		opts = append(opts, stomp.SendOpt.Receipt)
	}
	return conn.Send(queue, "application/json", body, opts...)
}

// publishPaced sends n messages at rate per second, each built at its send time so that
// its "sentAt" is the moment it left the publisher. A late schedule is not skipped: the
// publisher catches up, as a real producer with a backlog would.
func publishPaced(ctx context.Context, conn *stomp.Conn, queue string, n int, rate float64, body func(i int, sentAt time.Time) []byte) error {
	start := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
		if err := send(conn, queue, body(i, time.Now()), i == n-1); err != nil {
			return fmt.Errorf("publishing message %d of %d to %s: %w", i+1, n, queue, err)
		}
	}
	return nil
}

// drain consumes queue with auto-ack until want messages arrived (want > 0) or, with
// want == 0, until the queue stays silent for idle. It returns the count and the time
// from subscription to the last message. This is row 1, and also how a failed row's
// leftovers are purged.
func drain(ctx context.Context, addr, queue string, prefetchN, want int, idle time.Duration) (int, time.Duration, error) {
	conn, err := dial(ctx, addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Disconnect()
	start := time.Now()
	sub, err := conn.Subscribe(queue, stomp.AckAuto, prefetch(prefetchN)...)
	if err != nil {
		return 0, 0, fmt.Errorf("subscribing to %s: %w", queue, err)
	}
	var (
		n    int
		last = start
	)
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for want == 0 || n < want {
		select {
		case <-ctx.Done():
			return n, last.Sub(start), ctx.Err()
		case <-timer.C:
			if want == 0 {
				return n, last.Sub(start), nil
			}
			return n, last.Sub(start), fmt.Errorf("queue %s silent for %s after %d of %d messages", queue, idle, n, want)
		case m, ok := <-sub.C:
			if !ok {
				return n, last.Sub(start), errors.New("subscription closed")
			}
			if m.Err != nil {
				return n, last.Sub(start), fmt.Errorf("reading %s: %w", queue, m.Err)
			}
			n++
			last = time.Now()
			timer.Reset(idle)
		}
	}
	return n, last.Sub(start), nil
}

// quietLogger drops go-stomp's log lines (e.g. "connection closed" on every
// Disconnect), which would interleave with the table; errors reach us as values.
type quietLogger struct{}

func (quietLogger) Debugf(string, ...any)   {}
func (quietLogger) Infof(string, ...any)    {}
func (quietLogger) Warningf(string, ...any) {}
func (quietLogger) Errorf(string, ...any)   {}
func (quietLogger) Debug(string)            {}
func (quietLogger) Info(string)             {}
func (quietLogger) Warning(string)          {}
func (quietLogger) Error(string)            {}
