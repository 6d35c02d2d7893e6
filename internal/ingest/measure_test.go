package ingest

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/loadgen"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestMeasureThroughput is a measurement, not a check of behavior: it pre-publishes
// INBOXD_INGEST_MEASURE messages (30% duplicates, 1% malformed) per configuration,
// times the subscriber from start until every message is acked, and verifies the
// journal exactly. Run it with
//
//	INBOXD_INGEST_MEASURE=20000 go test -run TestMeasureThroughput -v -timeout 20m ./internal/ingest/
func TestMeasureThroughput(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("INBOXD_INGEST_MEASURE"))
	if n <= 0 {
		t.Skip("set INBOXD_INGEST_MEASURE=<messages> to measure ingest throughput")
	}
	addr := testenv.Broker(t)
	tests := []struct {
		ack   AckMode
		batch int
	}{
		{AckIndividual, 64},
		{AckIndividual, 256},
		{AckIndividual, 1024},
		{AckCumulative, 64},
		{AckCumulative, 256},
		{AckCumulative, 1024},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/batch%d", tt.ack, tt.batch), func(t *testing.T) {
			db := testenv.NewDB(t)
			q := testenv.Queue(t)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			pubStart := time.Now()
			exp, err := loadgen.Publish(ctx, loadgen.Config{Broker: stompx.Config{Addr: addr}, Destination: q,
				Messages: n, DuplicateRatio: 0.3, MalformedRatio: 0.01, Seed: 2026, Conns: 4})
			if err != nil {
				t.Fatal(err)
			}
			pubDur := time.Since(pubStart)
			start := time.Now()
			r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, AckMode: tt.ack, BatchSize: tt.batch}, db.Pool, hooks{})
			testenv.Eventually(t, 5*time.Minute, "every message acked", func() bool { return r.counter("acked", q) >= float64(exp.Sent) })
			dur := time.Since(start)
			r.stop(t)
			if err := loadgen.Verify(ctx, db.Pool, exp); err != nil {
				t.Fatal(err)
			}
			t.Logf("RESULT ack=%s batch=%d prefetch=%d messages=%d unique=%d malformed=%d duplicates=%v: ingest %.2fs = %.0f msg/s (publish %.0f msg/s)",
				tt.ack, tt.batch, 4*tt.batch, exp.Sent, len(exp.IDs), exp.MalformedCount(), r.counter("duplicates", q),
				dur.Seconds(), float64(exp.Sent)/dur.Seconds(), float64(exp.Sent)/pubDur.Seconds())
		})
	}
}
