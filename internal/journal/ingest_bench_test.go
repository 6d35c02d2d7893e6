package journal_test

import (
	"context"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/loadgen"
	"github.com/inboxd/inboxd/internal/testenv"
)

// BenchmarkIngest writes batches of 350 registrations, 30% of them redeliveries, the
// shape of the bench's ingest row, one batch per op, so that a change to ingest's
// statement can be timed without the broker:
//
//	go test -run '^$' -bench 'Ingest$' -count 5 ./internal/journal
func BenchmarkIngest(b *testing.B) {
	const batch = 350
	ctx := context.Background()
	db := testenv.NewDB(b)
	bodies, _, err := loadgen.Plan(loadgen.Config{Destination: "/queue/bench", Messages: batch * b.N, DuplicateRatio: 0.3, Seed: 29, EventType: "registration"})
	if err != nil {
		b.Fatal(err)
	}
	entries := make([]journal.Entry, len(bodies))
	for i, body := range bodies {
		entries[i] = entry(b, string(body))
	}
	b.ResetTimer()
	for i := range b.N {
		if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Entries: entries[i*batch : (i+1)*batch]}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*batch), "µs/entry")
}
