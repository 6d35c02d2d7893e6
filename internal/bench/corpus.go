package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/inboxd/inboxd/internal/message"
)

// Mix describes the messages a drain row consumes.
type Mix struct {
	N              int     // messages published, duplicates and malformed included
	DupRatio       float64 // share of N that repeats an earlier message byte for byte
	MalformedRatio float64 // share of N that must be quarantined
	Seed           uint64
}

// Corpus is a generated set of message bodies and what ingesting them must produce.
type Corpus struct {
	Bodies    [][]byte
	IDs       []string // the unique valid ids: exactly the journal's rows after ingest
	Malformed int      // distinct malformed bodies: exactly the quarantine's rows
}

// Generate builds the corpus of m, deterministically from m.Seed. Duplicates are exact
// copies of a valid message and land anywhere in the order (a redelivery can overtake
// the original); every malformed body is distinct so that each is one quarantine row.
func Generate(m Mix) Corpus {
	rng := rand.New(rand.NewPCG(m.Seed, m.Seed^0x9e3779b97f4a7c15))
	malformed := int(math.Round(float64(m.N) * m.MalformedRatio))
	dups := int(math.Round(float64(m.N) * m.DupRatio))
	unique := m.N - malformed - dups
	if unique < 1 {
		unique, dups = min(1, m.N-malformed), max(0, m.N-malformed-1)
	}
	c := Corpus{Bodies: make([][]byte, 0, m.N), IDs: make([]string, 0, unique), Malformed: malformed}
	at := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range unique {
		id := message.SeededID(rng)
		c.IDs = append(c.IDs, id)
		c.Bodies = append(c.Bodies, registrationBody(id, i, at, time.Time{}))
	}
	for range dups {
		c.Bodies = append(c.Bodies, c.Bodies[rng.IntN(unique)])
	}
	for i := range malformed {
		c.Bodies = append(c.Bodies, malformedBody(i))
	}
	rng.Shuffle(len(c.Bodies), func(i, j int) { c.Bodies[i], c.Bodies[j] = c.Bodies[j], c.Bodies[i] })
	return c
}

// registrationBody is a registration event as the demo's producers send it. sentAt, when
// set, is the publisher's clock, from which the end-to-end latency is computed.
func registrationBody(id string, i int, registeredAt, sentAt time.Time) []byte {
	return registrationBodyOf(id, i, fmt.Sprintf("customer-%d", i), fmt.Sprintf("bench-%d@example.com", i), registeredAt, sentAt)
}

// registrationBodyOf is registrationBody with the aggregate and email given.
func registrationBodyOf(id string, i int, aggregate, email string, registeredAt, sentAt time.Time) []byte {
	jur := [...]string{"mga", "ukgc", "sga", "dga"}[i%4]
	s := fmt.Sprintf(`{"id":%q,"type":"registration","aggregateId":%q,"jurisdiction":%q,"email":%q,"name":"Bench Customer %d","createdAt":%q`,
		id, aggregate, jur, email, i, registeredAt.Format(time.RFC3339Nano))
	if !sentAt.IsZero() {
		s += fmt.Sprintf(`,"sentAt":%q`, sentAt.UTC().Format(time.RFC3339Nano))
	}
	return []byte(s + "}")
}

// malformedBody cycles through the reasons a message is quarantined.
func malformedBody(i int) []byte {
	switch i % 4 {
	case 0:
		return fmt.Appendf(nil, "not json #%d", i)
	case 1:
		return fmt.Appendf(nil, `{"type":"registration","n":%d}`, i) // no id
	case 2:
		return fmt.Appendf(nil, `{"id":%d}`, i) // a number: any string would be an id (issue 22.3)
	default:
		return fmt.Appendf(nil, `[%d]`, i) // JSON, not an object
	}
}
