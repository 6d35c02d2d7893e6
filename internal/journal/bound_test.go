package journal_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/sqlbound"
	"github.com/inboxd/inboxd/internal/testenv"
)

// bigEntry is a valid event of about size bytes, its number i in the payload.
func bigEntry(t *testing.T, i, size int) journal.Entry {
	t.Helper()
	body := fmt.Sprintf(`{"id":"00000000-0000-4000-8000-%012d","n":%d,"pad":%q}`, i, i, strings.Repeat("x", size))
	ev, err := message.Decode([]byte(body), func(string) string { return "" },
		message.Options{DefaultEventType: "registration", MaxBodyBytes: len(body)})
	if err != nil {
		t.Fatalf("decoding entry %d: %v", i, err)
	}
	return journal.Entry{Event: ev, Destination: "/queue/test"}
}

// TestIngestOverMessageLimit is issue 19's "batch over 16 MiB": behind a proxy that
// refuses client messages over 16 MiB as CockroachDB does, batches whose bodies add up
// to more than that are written whole, in arrival order, with no statement refused.
func TestIngestOverMessageLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, proxy := testenv.NewLimitedDB(t, testenv.CockroachMessageLimit)

	t.Run("entries", func(t *testing.T) {
		var b journal.Batch
		for i := range 40 { // 40 × 512 KiB = 20 MiB
			b.Entries = append(b.Entries, bigEntry(t, i, 512<<10))
		}
		res, err := journal.Ingest(ctx, db.Pool, b)
		if err != nil {
			t.Fatalf("Ingest of 20 MiB: %v (largest message sent %d bytes)", err, proxy.Largest())
		}
		if res.Inserted != 40 {
			t.Fatalf("inserted %d of 40", res.Inserted)
		}
		if n := count(t, db.Pool, `SELECT count(*) FROM (SELECT (payload->>'n')::INT AS n,
			row_number() OVER (ORDER BY sequence_no) - 1 AS r FROM journal) AS s WHERE n <> r`); n != 0 {
			t.Errorf("%d entries out of arrival order", n)
		}
	})
	t.Run("bad messages", func(t *testing.T) {
		var b journal.Batch
		for i := range 40 {
			b.Bad = append(b.Bad, journal.Bad{Reason: message.ReasonNotJSON, Destination: "/queue/t",
				Body: fmt.Appendf(nil, "%d %s", i, strings.Repeat("y", 512<<10))})
		}
		res, err := journal.Ingest(ctx, db.Pool, b)
		if err != nil || res.Quarantined != 40 {
			t.Fatalf("Ingest of 40 bad messages of 512 KiB: %+v, %v", res, err)
		}
	})
	t.Run("headers", func(t *testing.T) {
		h := map[string]string{}
		for i := range 40 {
			h[fmt.Sprintf("h%02d", i)] = strings.Repeat("z", 512<<10)
		}
		bad := journal.Bad{Reason: message.ReasonNotJSON, Destination: "/queue/t", Body: []byte("headers"), Headers: h}
		if _, err := journal.Ingest(ctx, db.Pool, journal.Batch{Bad: []journal.Bad{bad}}); err != nil {
			t.Fatalf("Ingest of a bad message with 20 MiB of headers: %v", err)
		}
	})
	if proxy.Refused() != 0 || proxy.Largest() > sqlbound.DefaultMaxStatementBytes {
		t.Errorf("%d statements refused; largest %d bytes, over the bound %d", proxy.Refused(), proxy.Largest(), sqlbound.DefaultMaxStatementBytes)
	}
	t.Logf("largest client message: %d bytes", proxy.Largest())
}

// TestIngestTooLargeForOneStatement: a message larger than one statement can carry is
// quarantined too_large with as much of its raw body as fits and a digest of all of it,
// and re-inject refuses to publish the truncated body.
func TestIngestTooLargeForOneStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, proxy := testenv.NewLimitedDB(t, testenv.CockroachMessageLimit)
	body := bytes.Repeat([]byte("0123456789abcdef"), (20<<20)/16) // 20 MiB
	cases := map[string]journal.Batch{
		"bad": {Bad: []journal.Bad{{Reason: message.ReasonTooLarge, Detail: "body is 20971520 bytes, limit is 262144",
			Destination: "/queue/t", Body: body}}},
		"entry": {Entries: []journal.Entry{bigEntry(t, 1, 20<<20)}},
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			res, err := journal.Ingest(ctx, db.Pool, b)
			if err != nil || res.Quarantined != 1 {
				t.Fatalf("Ingest: %+v, %v", res, err)
			}
		})
	}
	rows, _, err := journal.ListQuarantine(ctx, db.Pool, string(message.ReasonTooLarge), journal.QuarantinePage{Limit: 10})
	if err != nil || len(rows) != 2 {
		t.Fatalf("quarantine: %d rows, %v", len(rows), err)
	}
	for _, q := range rows {
		_, got, err := journal.QuarantineBody(ctx, db.Pool, q.ID)
		if err != nil || len(got) == 0 || len(got) > journal.MaxQuarantineBody(sqlbound.DefaultMaxStatementBytes) {
			t.Fatalf("kept %d bytes, %v", len(got), err)
		}
		if !strings.HasPrefix(q.Detail, "body truncated") || !strings.Contains(q.Detail, "sha256") {
			t.Errorf("detail %q does not say the body was truncated", q.Detail)
		}
		_, err = journal.Reinject(ctx, db.Pool, q.ID, true, func(context.Context, journal.QuarantineRecord, []byte) error {
			t.Error("a truncated body was published")
			return nil
		})
		if !errors.Is(err, journal.ErrBodyTruncated) {
			t.Errorf("Reinject of a truncated body: %v, want ErrBodyTruncated", err)
		}
	}
	if proxy.Refused() != 0 {
		t.Errorf("%d statements refused", proxy.Refused())
	}
}

// TestIngestMessageTooLargeIsNotAnOutage: when the database's limit is lower than the
// statement bound (an operator lowered sql.conn.max_read_buffer_message_size), its 08P01
// is deterministic: the batch is split until it fits, and a message that fits in no
// statement is quarantined, instead of the batch being retried forever as an outage.
func TestIngestMessageTooLargeIsNotAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, proxy := testenv.NewLimitedDB(t, 1<<20)
	var b journal.Batch
	for i := range 10 { // 10 × 300 KiB: 3 MiB, one statement under the 8 MiB bound
		b.Entries = append(b.Entries, bigEntry(t, i, 300<<10))
	}
	b.Entries = append(b.Entries, bigEntry(t, 10, 2<<20)) // alone over the server's 1 MiB
	b.Bad = append(b.Bad, journal.Bad{Reason: message.ReasonNotJSON, Destination: "/queue/t", Body: bytes.Repeat([]byte("q"), 2<<20)})
	res, err := journal.Ingest(ctx, db.Pool, b)
	if err != nil {
		t.Fatalf("Ingest: %v", err)
	}
	if res.Inserted != 10 || res.Quarantined != 2 {
		t.Fatalf("result %+v, want 10 inserted and 2 quarantined", res)
	}
	if proxy.Refused() == 0 {
		t.Fatal("no statement was refused: the server's limit was not exercised")
	}
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine WHERE reason = 'too_large'`); n != 1 {
		t.Errorf("%d too_large rows, want 1", n)
	}
	// Both keep their first 4 KiB, and say so.
	if n := count(t, db.Pool, `SELECT count(*) FROM quarantine WHERE length(body) = 4096 AND detail LIKE 'body truncated%'`); n != 2 {
		t.Errorf("%d rows keep 4 KiB and say so, want 2", n)
	}
	tooLarge := &pgconn.PgError{Code: "08P01", Message: "message size 17 MiB bigger than maximum allowed message size 16 MiB"}
	if journal.IsUnavailable(fmt.Errorf("inserting: %w", tooLarge)) {
		t.Error("IsUnavailable(message too large) = true: it would be retried forever")
	}
}
