// Package loadgen publishes a deterministic mix of valid, duplicate and malformed
// messages to a destination, and verifies afterwards that the journal and quarantine
// hold exactly what ingest should have made of them. It backs `inboxd publish`,
// `make verify-ingest` and the benchmarks.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/go-stomp/stomp/v3"
	"github.com/go-stomp/stomp/v3/frame"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
)

// Config says what to publish.
type Config struct {
	Broker      stompx.Config
	Destination string
	Messages    int // total messages sent, duplicates and malformed included
	// DuplicateRatio is the fraction of messages that repeat an earlier valid message
	// byte for byte (a redelivery as a producer would cause it).
	DuplicateRatio float64
	// MalformedRatio is the fraction of messages ingest must quarantine, spread evenly
	// over: not JSON, missing id, non-UUID id, oversize.
	MalformedRatio float64
	Seed           uint64 // same seed, same messages, same order
	Conns          int    // parallel connections, default 4
	// ReceiptEvery asks for a RECEIPT every so many sends per connection (default 500)
	// and always on the last: the receipt proves the broker processed every earlier
	// frame of that connection, without paying one round trip per message.
	ReceiptEvery int
	EventType    string // the payload's "type", default "loadgen"
	// MaxBodyBytes is the subscriber's body limit; oversize messages exceed it by one
	// byte. 0 means message.DefaultMaxBodyBytes.
	MaxBodyBytes int
}

// Expected is what a correct ingest of the published messages must produce.
type Expected struct {
	Destination   string
	Sent          int
	IDs           []string // unique valid event ids, canonical form
	Duplicates    int      // messages repeating an earlier valid one
	Malformed     map[message.Reason]int
	QuarantineIDs []string // the quarantine row id of every malformed message
}

// MalformedCount is the number of malformed messages sent.
func (e Expected) MalformedCount() int { return len(e.QuarantineIDs) }

var malformedKinds = []message.Reason{message.ReasonNotJSON, message.ReasonMissingID, message.ReasonInvalidID, message.ReasonTooLarge}

// Plan builds the messages of cfg, deterministically, and what ingest must make of them.
func Plan(cfg Config) ([][]byte, Expected, error) {
	if cfg.Messages < 0 || cfg.DuplicateRatio < 0 || cfg.MalformedRatio < 0 || cfg.DuplicateRatio+cfg.MalformedRatio > 1 {
		return nil, Expected{}, fmt.Errorf("loadgen: invalid counts or ratios (%d messages, %.3f duplicates, %.3f malformed)",
			cfg.Messages, cfg.DuplicateRatio, cfg.MalformedRatio)
	}
	if cfg.Destination == "" {
		return nil, Expected{}, errors.New("loadgen: destination is required")
	}
	eventType := cfg.EventType
	if eventType == "" {
		eventType = "loadgen"
	}
	limit := cfg.MaxBodyBytes
	if limit <= 0 {
		limit = message.DefaultMaxBodyBytes
	}
	nMal := int(math.Round(float64(cfg.Messages) * cfg.MalformedRatio))
	nDup := int(math.Round(float64(cfg.Messages) * cfg.DuplicateRatio))
	nNew := cfg.Messages - nMal - nDup
	if nNew == 0 && nDup > 0 {
		nDup, nNew = nDup-1, 1
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	exp := Expected{Destination: cfg.Destination, Sent: cfg.Messages, Duplicates: nDup, Malformed: map[message.Reason]int{}}
	bodies := make([][]byte, 0, cfg.Messages)
	for i := range nNew {
		id := message.SeededID(rng)
		exp.IDs = append(exp.IDs, id)
		bodies = append(bodies, fmt.Appendf(nil,
			`{"id":%q,"type":%q,"aggregateId":"agg-%d","seq":%d,"email":"user-%s@example.com","name":"Load Gen %d"}`,
			id, eventType, rng.IntN(1000), i, id[:8], i))
	}
	for range nDup {
		bodies = append(bodies, bodies[rng.IntN(nNew)])
	}
	for i := range nMal {
		reason := malformedKinds[i%len(malformedKinds)]
		nonce := message.SeededID(rng) // keeps every malformed body, hence its quarantine row, distinct
		var body []byte
		switch reason {
		case message.ReasonNotJSON:
			body = fmt.Appendf(nil, "not json %s", nonce)
		case message.ReasonMissingID:
			body = fmt.Appendf(nil, `{"type":%q,"nonce":%q}`, eventType, nonce)
		case message.ReasonInvalidID:
			// Any string is an id (issue 22.3); a number is not.
			body = fmt.Appendf(nil, `{"id":12345,"nonce":%q,"type":%q}`, nonce, eventType)
		case message.ReasonTooLarge:
			head := fmt.Sprintf(`{"id":%q,"pad":"`, nonce)
			pad := limit + 1 - len(head) - 2
			body = append([]byte(head), strings.Repeat("x", max(pad, 0))...)
			body = append(body, '"', '}')
		}
		exp.Malformed[reason]++
		exp.QuarantineIDs = append(exp.QuarantineIDs, message.QuarantineID(reason, cfg.Destination, body))
		bodies = append(bodies, body)
	}
	rng.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	return bodies, exp, nil
}

// Publish sends the messages of cfg as persistent messages over cfg.Conns connections
// and returns what ingest must make of them. A nil error means the broker confirmed
// (by receipt) every connection's last message, hence all of them.
func Publish(ctx context.Context, cfg Config) (Expected, error) {
	bodies, exp, err := Plan(cfg)
	if err != nil {
		return Expected{}, err
	}
	conns := cfg.Conns
	if conns <= 0 {
		conns = 4
	}
	conns = min(conns, max(len(bodies), 1))
	every := cfg.ReceiptEvery
	if every <= 0 {
		every = 500
	}
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for c := range conns {
		wg.Go(func() {
			errs[c] = publishShare(ctx, cfg, bodies, c, conns, every)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Expected{}, err
	}
	return exp, nil
}

// publishShare sends bodies[c], bodies[c+n], … on a connection of its own.
func publishShare(ctx context.Context, cfg Config, bodies [][]byte, c, n, every int) error {
	conn, err := stompx.DialConn(ctx, cfg.Broker)
	if err != nil {
		return err
	}
	defer conn.Close()
	persistent := stomp.SendOpt.Header("persistent", "true")
	sent := 0
	for i := c; i < len(bodies); i += n {
		if err := ctx.Err(); err != nil {
			return err
		}
		sent++
		opts := []func(*frame.Frame) error{persistent}
		if sent%every == 0 || i+n >= len(bodies) {
			opts = append(opts, stomp.SendOpt.Receipt)
		}
		if err := conn.Send(cfg.Destination, "", bodies[i], opts...); err != nil {
			return fmt.Errorf("%w: publishing message %d to %s: %w", stompx.ErrUnavailable, i, cfg.Destination, err)
		}
	}
	return nil
}
