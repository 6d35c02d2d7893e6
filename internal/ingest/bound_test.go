package ingest

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/sqlbound"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestIngestBatchOverMessageLimit is issue 19's "batch over 16 MiB" end to end: behind
// a proxy that refuses client messages over 16 MiB as CockroachDB does, 18 messages of
// 1 MiB (with the default batch size, one batch of 18 MiB before) and one of 3 MiB (over
// the body limit) are all journaled or quarantined, no statement is refused, and each
// batch fits one statement. (The shared broker's heap is small: bodies truncated to fit
// a statement are tested in the journal package.)
func TestIngestBatchOverMessageLimit(t *testing.T) {
	t.Parallel()
	addr := testenv.Broker(t)
	db, proxy := testenv.NewLimitedDB(t, testenv.CockroachMessageLimit)
	q := testenv.Queue(t)
	const n, size = 18, 1 << 20
	for i := range n {
		publish(t, addr, q, fmt.Appendf(nil, `{"id":%q,"n":%d,"pad":%q}`, message.NewID(), i, strings.Repeat("p", size)), nil)
	}
	huge := fmt.Appendf(nil, `{"id":%q,"pad":%q}`, message.NewID(), strings.Repeat("h", 3<<20))
	publish(t, addr, q, huge, nil)

	var largestBatch atomic.Int64
	h := hooks{beforeIngest: func(_ context.Context, _ string, msgs int) {
		for {
			l := largestBatch.Load()
			if int64(msgs) <= l || largestBatch.CompareAndSwap(l, int64(msgs)) {
				return
			}
		}
	}}
	// A long linger, so that batches are closed by their size, not by time.
	r := startSubscriber(t, Config{Addr: addr, Destinations: []string{q}, MaxBodyBytes: 2 << 20, Linger: time.Second}, db.Pool, h)
	testenv.Eventually(t, 60*time.Second, "every message journaled or quarantined", func() bool {
		return count(t, db.Pool, `SELECT count(*) FROM journal`) == n &&
			count(t, db.Pool, `SELECT count(*) FROM quarantine WHERE reason = 'too_large'`) == 1
	})
	testenv.Eventually(t, 10*time.Second, "every message acked", func() bool { return r.counter("acked", q) == n+1 })
	if proxy.Refused() != 0 {
		t.Errorf("%d statements refused by the 16 MiB limit", proxy.Refused())
	}
	if proxy.Largest() > sqlbound.DefaultMaxStatementBytes {
		t.Errorf("largest statement %d bytes, over the bound %d", proxy.Largest(), sqlbound.DefaultMaxStatementBytes)
	}
	// Each batch of 1 MiB messages fits one statement: at most 7 of them in 8 MiB.
	if l := largestBatch.Load(); l > 8 {
		t.Errorf("a batch held %d messages of 1 MiB: more than one statement's worth", l)
	}
	if got := count(t, db.Pool, `SELECT length(body) FROM quarantine WHERE reason = 'too_large'`); got != len(huge) {
		t.Errorf("kept %d of the too-large body's %d bytes", got, len(huge))
	}
	t.Logf("largest statement %d bytes, largest batch %d messages", proxy.Largest(), largestBatch.Load())
}
