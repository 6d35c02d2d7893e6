package stompx

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/go-stomp/stomp/v3"
)

// ActiveMQ's STOMP extensions for durable topic subscriptions
// (https://activemq.apache.org/components/classic/documentation/stomp, "ActiveMQ
// extensions to STOMP"): CONNECT carries client-id, SUBSCRIBE carries
// activemq.subscriptionName, and an UNSUBSCRIBE that carries activemq.subscriptionName
// on a connection with the same client-id deletes the subscription
// (activemq-stomp ProtocolConverter.onStompUnsubscribe sends a RemoveSubscriptionInfo;
// checked on 5.17.2 with STOMP 1.2). A plain UNSUBSCRIBE only detaches the consumer: the
// subscription stays, and keeps collecting messages.
const (
	HeaderClientID         = "client-id"
	HeaderSubscriptionName = "activemq.subscriptionName"
)

// ErrClientIDInUse means the broker refused CONNECT because another connection holds
// the client id. ActiveMQ answers with an ERROR frame carrying
// javax.jms.InvalidClientIDException ("Client: X already connected from tcp://…") and
// closes the socket. It also happens for a moment after a connection with that id died,
// until the broker notices.
var ErrClientIDInUse = errors.New("client id in use by another connection")

// ErrNoSuchSubscription means the broker has no durable subscription of that client id
// and name.
var ErrNoSuchSubscription = errors.New("no such durable subscription")

func clientIDInUse(err error) bool {
	var se stomp.Error
	if !errors.As(err, &se) {
		return false
	}
	if se.Frame != nil && strings.Contains(string(se.Frame.Body), "InvalidClientIDException") {
		return true
	}
	return strings.Contains(se.Message, "already connected from")
}

// IsTopic reports whether destination is an ActiveMQ topic, which only delivers to
// subscribers that exist when a message is published.
func IsTopic(destination string) bool { return strings.HasPrefix(destination, "/topic/") }

// removeVia is the destination of the throwaway subscription RemoveDurable needs:
// go-stomp sends UNSUBSCRIBE only for a subscription of its own. It is a plain
// non-durable topic subscription that never receives anything and ends with the
// connection.
const removeVia = "/topic/inboxd.subscriptions.remove"

// RemoveDurable deletes the durable subscription name of client id cfg.ClientID on
// topic destination, with every message it holds.
//
// On ActiveMQ it connects with that client id, so it fails with ErrClientIDInUse while a
// consumer (an inboxd instance) is attached; the broker would refuse to delete an
// active subscription anyway. A missing subscription gives ErrNoSuchSubscription.
//
// On RabbitMQ the subscription is the queue of its SUBSCRIBE id and destination, and it
// is deleted by an UNSUBSCRIBE of that id with the durable and auto-delete headers it
// was made with (https://www.rabbitmq.com/docs/stomp, "Deleting a Durable
// Subscription"). RabbitMQ deletes it even while an instance consumes it, and a missing
// one is made and deleted at once: callers check first.
func RemoveDurable(ctx context.Context, cfg Config, name, destination string) error {
	if cfg.ClientID == "" || name == "" {
		return errors.New("removing a durable subscription needs a client id and a subscription name")
	}
	conn, err := DialConn(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Abort()
	if conn.Dialect.Broker() == BrokerRabbitMQ {
		return removeRabbitDurable(conn, Durable{ClientID: cfg.ClientID, Name: name}, destination)
	}
	sub, err := conn.Subscribe(removeVia, stomp.AckAuto)
	if err != nil {
		return fmt.Errorf("%w: preparing the removal: %w", ErrUnavailable, err)
	}
	// go-stomp waits for the RECEIPT (bounded by cfg.ReceiptTimeout). An ERROR frame
	// (no such subscription, or not allowed) closes the connection, and the
	// subscription's channel then carries it.
	if err := sub.Unsubscribe(stomp.SubscribeOpt.Header(HeaderSubscriptionName, name)); err != nil {
		// The broker's ERROR (no such subscription) closes the connection, so the wait
		// for the RECEIPT can end in its timeout, the ERROR already on sub.C.
		select {
		case m, ok := <-sub.C:
			if ok && m.Err != nil {
				return removalRefused(m.Err, cfg.ClientID, name)
			}
		default:
		}
		return fmt.Errorf("%w: removing durable subscription %q of client id %q: %w", ErrUnavailable, name, cfg.ClientID, err)
	}
	select {
	case m, ok := <-sub.C:
		if ok && m.Err != nil {
			return removalRefused(m.Err, cfg.ClientID, name)
		}
	case <-ctx.Done():
		return fmt.Errorf("removing durable subscription %q (outcome unknown): %w", name, ctx.Err())
	}
	return conn.Close()
}

// removalRefused is RemoveDurable's error for the broker's ERROR frame.
func removalRefused(err error, clientID, name string) error {
	if strings.Contains(err.Error(), "No durable subscription exists") {
		return fmt.Errorf("%w: client id %q, subscription %q", ErrNoSuchSubscription, clientID, name)
	}
	return fmt.Errorf("removing durable subscription %q of client id %q: broker said: %w", name, clientID, err)
}

func removeRabbitDurable(conn *Conn, dur Durable, destination string) error {
	if !IsTopic(destination) {
		return fmt.Errorf("removing durable subscription %q of client id %q: destination %q is not a topic", dur.Name, dur.ClientID, destination)
	}
	// go-stomp sends UNSUBSCRIBE only for a subscription of its own: attach with the
	// same id first. Nothing is acked, so whatever arrives meanwhile goes with the queue.
	sub, err := conn.Subscribe(destination, stomp.AckClient, conn.Dialect.SubscribeHeaders(1, &dur)...)
	if err == nil {
		err = conn.Barrier()
	}
	if err != nil {
		return fmt.Errorf("%w: preparing the removal: %w", ErrUnavailable, err)
	}
	if err := sub.Unsubscribe(stomp.SubscribeOpt.Header("durable", "true"), stomp.SubscribeOpt.Header("auto-delete", "false")); err != nil {
		return fmt.Errorf("%w: removing durable subscription %q of client id %q: %w", ErrUnavailable, dur.Name, dur.ClientID, err)
	}
	return conn.Close()
}

// ErrNoClientIDs is ClientIDInUse's answer on a broker without exclusive client ids
// (RabbitMQ): whether an instance consumes a subscription cannot be asked that way.
var ErrNoClientIDs = errors.New("the broker has no exclusive client ids (RabbitMQ): whether a subscription is consumed cannot be asked over STOMP")

// ClientIDInUse reports whether a connection currently holds cfg.ClientID, by trying to
// connect with it. A connection that succeeds is closed at once.
func ClientIDInUse(ctx context.Context, cfg Config) (bool, error) {
	cfg.HeartBeat = -1
	conn, err := DialConn(ctx, cfg)
	if errors.Is(err, ErrClientIDInUse) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if !conn.Dialect.ExclusiveClientID() {
		return false, errors.Join(ErrNoClientIDs, conn.Close())
	}
	return false, conn.Close()
}
