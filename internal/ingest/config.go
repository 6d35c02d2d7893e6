package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-stomp/stomp/v3"
	"go.opentelemetry.io/otel/trace"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/defaults"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/stompx"
)

// AckMode is how a committed batch is acknowledged.
type AckMode string

const (
	// AckIndividual sends one ACK per message (STOMP client-individual).
	AckIndividual AckMode = "client-individual"
	// AckCumulative sends one ACK per batch, for its last message (STOMP client), which
	// acknowledges every earlier message of the subscription too. Safe because batches
	// are committed and acked in dispatch order; see the package documentation.
	AckCumulative AckMode = "client"
)

func (m AckMode) stomp() (stomp.AckMode, error) {
	switch m {
	case AckIndividual:
		return stomp.AckClientIndividual, nil
	case AckCumulative:
		return stomp.AckClient, nil
	}
	return 0, fmt.Errorf("unknown ack mode %q (want %q or %q)", string(m), AckIndividual, AckCumulative)
}

// Config's zero values take the product's defaults (package defaults).
const (
	// reducedPrefetchFor is how long a subscription with a prefetch reduced for large
	// messages runs before it is renewed at the configured prefetch.
	reducedPrefetchFor = time.Minute
)

// Config configures a Subscriber.
type Config struct {
	// Broker connection: address, login, passcode, heart-beats.
	Addr      string
	Login     string
	Passcode  string
	HeartBeat time.Duration // 0 means stompx.DefaultHeartBeat
	TLS       *stompx.TLS   // nil: plaintext STOMP
	// Host is the STOMP host header (RabbitMQ's virtual host) and Broker the broker's
	// dialect; see stompx.Config.
	Host   string
	Broker stompx.Broker

	// Destinations to consume, one connection and subscription each, e.g. "/queue/registrations".
	// A "/topic/…" destination gets a durable subscription (see Durable); a plain topic
	// subscription loses whatever is published while inboxd is disconnected.
	Destinations []string

	// ClientID and SubscriptionName name the durable subscription of each topic
	// destination. ActiveMQ lets one connection at a time hold a client id, so the
	// connection of topic T connects as "<ClientID>.<T>" (see Durable). Both must stay
	// the same across restarts, or the old subscription is abandoned on the broker.
	ClientID         string
	SubscriptionName string
	// NonDurableTopics opts in to plain topic subscriptions, which lose every message
	// published while inboxd is disconnected. Without it, a topic destination with no
	// ClientID or SubscriptionName is refused (ErrNonDurableTopic).
	NonDurableTopics bool

	// BatchSize is the most messages one Ingest call writes (default defaults.BatchSize).
	BatchSize int
	// Linger is how long a batch waits for more messages once it has one (default defaults.BatchLinger).
	Linger time.Duration
	// Prefetch is how many unacked messages the broker may push to this subscription
	// (ActiveMQ's activemq.prefetchSize, RabbitMQ's prefetch-count; stompx.Dialect). It must exceed BatchSize, else batches never fill;
	// 0 means defaults.Prefetch, or 4×BatchSize for a batch too large for it, which lets
	// the next batch fill while one commits.
	Prefetch int
	// CommitsInFlight is how many batches of one destination are written at once
	// (default defaults.CommitsInFlight); acks still follow dispatch order. 1 writes one at a time.
	CommitsInFlight int
	// AckMode defaults to defaults.AckMode (cumulative).
	AckMode AckMode

	MaxBodyBytes int // bodies above this are quarantined; 0 means message.DefaultMaxBodyBytes
	// MaxStatementBytes bounds one journal statement, parameters included (CockroachDB
	// refuses a client message over 16 MiB); 0 means sqlbound.DefaultMaxStatementBytes.
	// A batch is closed before it outgrows one statement, and MaxBodyBytes must fit one.
	MaxStatementBytes int
	// MaxInflightBytes bounds the body bytes a destination holds unacked (default
	// defaults.MaxInflightBytes). The broker's prefetch counts messages, not bytes, and a
	// go-stomp subscription must be read promptly (its acks share one loop), so past the
	// bound the subscriber stops taking messages, commits and acks what it took, and
	// subscribes again with a prefetch that fits the bound for the largest body seen.
	MaxInflightBytes int64
	DefaultEventType string // for payloads that name no type
	// IDSource says where the event id is read from (zero: the payload's "id").
	IDSource message.IDSource

	// CommitTimeout bounds one Ingest call (default defaults.CommitTimeout). Ingest runs detached from
	// Run's context so that shutdown finishes the batch in flight.
	CommitTimeout time.Duration
	// StopTimeout bounds the polite end of a session at shutdown, once its last batch is
	// committed and acked: UNSUBSCRIBE and DISCONNECT, whose receipts prove the broker
	// has the acks. Past it the connection is dropped; the broker then redelivers what it
	// may not have seen acked, and the journal collapses the duplicates. Zero: only the
	// broker's receipt timeout bounds each frame.
	StopTimeout time.Duration
	// Backoff paces reconnects; its zero value is backoff.Reconnect (at least one try a
	// second).
	Backoff backoff.Policy

	Logger  *slog.Logger     // nil discards
	Metrics *metrics.Metrics // nil disables metrics
	// TracerProvider makes the batch spans; nil means otel's global provider.
	TracerProvider trace.TracerProvider

	// Contraction is where a journal write that finds the schema contracted by a newer
	// release is reported (logged once per instance); nil: ingest classifies it alone,
	// and logs it as a database outage.
	Contraction *journal.Contraction

	// OnCommit, when set, is called after each batch commit that journaled new entries,
	// with their number: processing's push (process.Engine.Kick). It must not block.
	OnCommit func(inserted int)
}

func (c Config) withDefaults() (Config, error) {
	if c.Addr == "" {
		return c, errors.New("ingest: broker address is required")
	}
	if len(c.Destinations) == 0 {
		return c, errors.New("ingest: at least one destination is required")
	}
	seen := map[string]bool{}
	for _, d := range c.Destinations {
		if d == "" || seen[d] {
			return c, fmt.Errorf("ingest: destination %q is empty or repeated", d)
		}
		seen[d] = true
		if stompx.IsTopic(d) && !c.NonDurableTopics && (c.ClientID == "" || c.SubscriptionName == "") {
			return c, fmt.Errorf("ingest: %w", NonDurableTopicError(d))
		}
	}
	c.BatchSize = defaults.Or(c.BatchSize, defaults.BatchSize)
	c.Linger = defaults.Or(c.Linger, defaults.BatchLinger)
	c.CommitsInFlight = defaults.Or(c.CommitsInFlight, defaults.CommitsInFlight)
	if c.Prefetch == 0 {
		// The product's prefetch, unless a larger batch would never fill under it.
		c.Prefetch = defaults.Prefetch
		if c.Prefetch <= c.BatchSize {
			c.Prefetch = 4 * c.BatchSize
		}
	}
	if c.Prefetch <= c.BatchSize {
		return c, fmt.Errorf("ingest: prefetch (%d) must exceed batch size (%d)", c.Prefetch, c.BatchSize)
	}
	if c.AckMode == "" {
		c.AckMode = AckMode(defaults.AckMode)
	}
	if _, err := c.AckMode.stomp(); err != nil {
		return c, fmt.Errorf("ingest: %w", err)
	}
	c.MaxBodyBytes = defaults.Or(c.MaxBodyBytes, defaults.MaxBodyBytes)
	c.MaxStatementBytes = defaults.Or(c.MaxStatementBytes, defaults.MaxStatementBytes)
	if err := journal.CheckBodyBound(c.MaxBodyBytes, c.MaxStatementBytes); err != nil {
		return c, fmt.Errorf("ingest: %w", err)
	}
	c.MaxInflightBytes = defaults.Or(c.MaxInflightBytes, defaults.MaxInflightBytes)
	if c.MaxInflightBytes < int64(c.MaxBodyBytes) {
		return c, fmt.Errorf("ingest: max in-flight bytes (%d) must be at least the max body size (%d)", c.MaxInflightBytes, c.MaxBodyBytes)
	}
	c.CommitTimeout = defaults.Or(c.CommitTimeout, defaults.CommitTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// ErrNonDurableTopic is returned for a topic destination that would be subscribed
// non-durably without an explicit opt-in.
var ErrNonDurableTopic = errors.New("refusing a non-durable topic subscription")

// NonDurableTopicError says why a topic destination without a durable subscription is
// refused, and what to do instead.
func NonDurableTopicError(dest string) error {
	return fmt.Errorf("%w: %s is a topic, and with no client id or subscription name inboxd would subscribe "+
		"non-durably: every event published while it is stopped, restarting or reconnecting would be lost "+
		"without a trace. Set a client id and a subscription name (a durable subscription), consume a virtual "+
		"topic through its queue (/queue/Consumer.<app>.VirtualTopic.<name>), or accept the loss explicitly "+
		"with the non-durable-topics setting", ErrNonDurableTopic, dest)
}

// Durable is the durable subscription of one topic destination.
type Durable struct {
	ClientID    string // the connection's client-id
	Name        string // activemq.subscriptionName
	Destination string
}

// DurableFor returns the durable subscription inboxd uses for a topic destination:
// client id "<clientID>.<topic name>", so that each topic's connection has a client id
// of its own, and the subscription name as given.
func DurableFor(clientID, name, dest string) Durable {
	return Durable{ClientID: clientID + "." + strings.TrimPrefix(dest, "/topic/"), Name: name, Destination: dest}
}

// durable reports the durable subscription of dest, if it gets one.
func (c Config) durable(dest string) (Durable, bool) {
	if !stompx.IsTopic(dest) || c.NonDurableTopics {
		return Durable{}, false
	}
	return DurableFor(c.ClientID, c.SubscriptionName, dest), true
}

func (c Config) broker() stompx.Config {
	return stompx.Config{Addr: c.Addr, Login: c.Login, Passcode: c.Passcode, Host: c.Host, Broker: c.Broker,
		HeartBeat: c.HeartBeat, TLS: c.TLS, Logger: c.Logger}
}
