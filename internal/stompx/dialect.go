package stompx

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"
)

// Broker names the STOMP broker inboxd talks to; each has a Dialect. Where ActiveMQ and
// RabbitMQ differ over STOMP, the difference lives here and nowhere else, as
// database.Dialect keeps the databases' differences in one place.
type Broker string

const (
	// BrokerAuto detects the broker from the CONNECTED frame's server header
	// ("ActiveMQ/5.17.2", "RabbitMQ/3.10.8"); an unknown server is taken as ActiveMQ.
	BrokerAuto     Broker = "auto"
	BrokerActiveMQ Broker = "activemq"
	BrokerRabbitMQ Broker = "rabbitmq"
)

// ParseBroker checks a configured broker name ("" means BrokerAuto).
func ParseBroker(s string) (Broker, error) {
	switch b := Broker(strings.ToLower(strings.TrimSpace(s))); b {
	case "":
		return BrokerAuto, nil
	case BrokerAuto, BrokerActiveMQ, BrokerRabbitMQ:
		return b, nil
	}
	return "", fmt.Errorf("unknown broker %q (want %q, %q or %q)", s, BrokerActiveMQ, BrokerRabbitMQ, BrokerAuto)
}

// DefaultHost is the STOMP host header sent when none is configured. RabbitMQ reads it
// as the virtual host and refuses an unknown one ("Virtual host '127.0.0.1' access
// denied"); its default virtual host is "/", which it also presumes when the header is
// absent (https://www.rabbitmq.com/docs/stomp, "Connection and Virtual Hosts").
// ActiveMQ ignores the header's value, and inboxd has always sent the host part of the
// address there, so that stays the default for ActiveMQ and auto.
func (b Broker) DefaultHost(addr string) string {
	if b == BrokerRabbitMQ {
		return "/"
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return ""
}

// Dialect is what one broker needs that the other does not.
type Dialect struct{ broker Broker }

var (
	ActiveMQ = Dialect{BrokerActiveMQ}
	RabbitMQ = Dialect{BrokerRabbitMQ}
)

// DialectOf returns the dialect of broker b; for BrokerAuto, the one the server header of
// the CONNECTED frame names.
func DialectOf(b Broker, server string) Dialect {
	switch b {
	case BrokerActiveMQ:
		return ActiveMQ
	case BrokerRabbitMQ:
		return RabbitMQ
	}
	if strings.HasPrefix(strings.ToLower(server), "rabbitmq") {
		return RabbitMQ
	}
	return ActiveMQ
}

// Broker names the dialect's broker.
func (d Dialect) Broker() Broker {
	if d.broker == "" {
		return BrokerActiveMQ
	}
	return d.broker
}

func (d Dialect) String() string { return string(d.Broker()) }

// Durable names a durable topic subscription.
type Durable struct {
	ClientID string // ActiveMQ: the CONNECT client-id; RabbitMQ: part of the subscription id
	Name     string
}

// SubscribeHeaders are the SUBSCRIBE headers of a subscription with prefetch messages
// at most unacked, durable when dur is not nil.
//
// ActiveMQ: activemq.prefetchSize, and activemq.subscriptionName for a durable topic
// subscription, whose client id goes on CONNECT (Config.ClientID)
// (https://activemq.apache.org/components/classic/documentation/stomp).
//
// RabbitMQ (https://www.rabbitmq.com/docs/stomp): prefetch-count ("Prefetch": without
// it the prefetch is unlimited; the plugin sets it with basic.qos on the subscription's
// channel); a durable topic subscription is durable:true, auto-delete:false and a
// stable id ("Durable Topic Subscriptions": a shared queue per subscription id and
// destination, bound to amq.topic, that outlives the connection). Queues (/queue/) are
// declared durable, non-exclusive, non-auto-delete when no header says otherwise
// ("Queue Destinations"), and /amq/queue/ consumes a queue declared outside STOMP.
func (d Dialect) SubscribeHeaders(prefetch int, dur *Durable) []func(*frame.Frame) error {
	if d.Broker() == BrokerRabbitMQ {
		opts := []func(*frame.Frame) error{stomp.SubscribeOpt.Header("prefetch-count", strconv.Itoa(prefetch))}
		if dur != nil {
			opts = append(opts, stomp.SubscribeOpt.Id(d.SubscriptionID(*dur)),
				stomp.SubscribeOpt.Header("durable", "true"), stomp.SubscribeOpt.Header("auto-delete", "false"))
		}
		return opts
	}
	opts := []func(*frame.Frame) error{stomp.SubscribeOpt.Header("activemq.prefetchSize", strconv.Itoa(prefetch))}
	if dur != nil {
		opts = append(opts, stomp.SubscribeOpt.Header(HeaderSubscriptionName, dur.Name))
	}
	return opts
}

// SubscriptionID is the SUBSCRIBE id of a durable subscription on RabbitMQ: the same on
// every connection, since the plugin keys the subscription's queue by it.
func (d Dialect) SubscriptionID(dur Durable) string { return dur.ClientID + "/" + dur.Name }

// ExclusiveClientID reports whether the broker lets one connection at a time hold a
// client id (ActiveMQ), which makes a second instance of a durable topic subscription
// stand by. RabbitMQ has no client ids: instances sharing a durable subscription share
// its queue, as competing consumers.
func (d Dialect) ExclusiveClientID() bool { return d.Broker() != BrokerRabbitMQ }

// GroupsMessages reports whether the broker pins a message group (JMSXGroupID) to one
// consumer, which keeps one aggregate's order across competing instances. ActiveMQ
// does; RabbitMQ has no message groups: there the order across instances holds only
// for a queue declared with x-single-active-consumer, which delivers to one consumer
// at a time and fails over to another (https://www.rabbitmq.com/docs/consumers,
// "Single Active Consumer"). The STOMP plugin cannot declare that argument (3.10's
// rabbit_stomp_headers.hrl lists the x- headers it passes on), nor can a policy set
// it: the queue is declared outside STOMP and consumed as /amq/queue/<name>.
func (d Dialect) GroupsMessages() bool { return d.Broker() != BrokerRabbitMQ }

// MessageIDIsStable reports whether the MESSAGE frame's message-id header stays the same
// when the message is redelivered, which id-source header:message-id relies on.
// ActiveMQ's is the JMS message id. RabbitMQ's is the delivery's, made of the
// subscription, the session and a delivery counter, and a publisher may not set it
// ("Header prohibited on SEND"); the AMQP message id travels as amqp-message-id.
func (d Dialect) MessageIDIsStable() bool { return d.Broker() != BrokerRabbitMQ }
