package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/go-stomp/stomp/v3"

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
	case AckIndividual, "":
		return stomp.AckClientIndividual, nil
	case AckCumulative:
		return stomp.AckClient, nil
	}
	return 0, fmt.Errorf("unknown ack mode %q (want %q or %q)", string(m), AckIndividual, AckCumulative)
}

// Defaults for Config's zero values.
const (
	DefaultBatchSize     = 256
	DefaultLinger        = 5 * time.Millisecond
	DefaultInFlight      = 2
	DefaultCommitTimeout = 30 * time.Second
)

// Config configures a Subscriber.
type Config struct {
	// Broker connection: address, login, passcode, heart-beats.
	Addr      string
	Login     string
	Passcode  string
	HeartBeat time.Duration // 0 means stompx.DefaultHeartBeat

	// Destinations to consume, one connection and subscription each, e.g. "/queue/registrations".
	Destinations []string

	// BatchSize is the most messages one Ingest call writes (default 256).
	BatchSize int
	// Linger is how long a batch waits for more messages once it has one (default 5ms).
	Linger time.Duration
	// Prefetch is sent as activemq.prefetchSize: how many unacked messages the broker
	// may push to this subscription. It must exceed BatchSize, else batches never fill;
	// 0 means 4×BatchSize, which lets the next batch fill while one commits.
	Prefetch int
	// CommitsInFlight is how many batches of one destination are written at once
	// (default DefaultInFlight); acks still follow dispatch order. 1 writes one at a time.
	CommitsInFlight int
	// AckMode defaults to AckIndividual.
	AckMode AckMode

	MaxBodyBytes     int    // bodies above this are quarantined; 0 means message.DefaultMaxBodyBytes
	DefaultEventType string // for payloads that name no type

	// CommitTimeout bounds one Ingest call (default 30s). Ingest runs detached from
	// Run's context so that shutdown finishes the batch in flight.
	CommitTimeout time.Duration
	// Backoff paces reconnects; its zero value is 100ms doubling up to 30s.
	Backoff stompx.Backoff

	Logger  *slog.Logger     // nil discards
	Metrics *metrics.Metrics // nil disables metrics

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
	}
	if c.BatchSize <= 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Linger <= 0 {
		c.Linger = DefaultLinger
	}
	if c.CommitsInFlight <= 0 {
		c.CommitsInFlight = DefaultInFlight
	}
	if c.Prefetch == 0 {
		c.Prefetch = 4 * c.BatchSize
	}
	if c.Prefetch <= c.BatchSize {
		return c, fmt.Errorf("ingest: prefetch (%d) must exceed batch size (%d)", c.Prefetch, c.BatchSize)
	}
	if _, err := c.AckMode.stomp(); err != nil {
		return c, fmt.Errorf("ingest: %w", err)
	}
	if c.AckMode == "" {
		c.AckMode = AckIndividual
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = message.DefaultMaxBodyBytes
	}
	if c.CommitTimeout <= 0 {
		c.CommitTimeout = DefaultCommitTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

func (c Config) broker() stompx.Config {
	return stompx.Config{Addr: c.Addr, Login: c.Login, Passcode: c.Passcode, HeartBeat: c.HeartBeat, Logger: c.Logger}
}
