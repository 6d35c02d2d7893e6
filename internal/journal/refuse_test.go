package journal_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

func goodEntry(t *testing.T, i int) journal.Entry {
	return entry(t, fmt.Sprintf(`{"id":"00000000-0000-4000-8000-%012d","n":%d}`, i, i))
}

// TestIngestQuarantinesWhatTheDatabaseRefuses puts rows the database refuses for
// different reasons between good ones: the batch must commit the good ones and
// quarantine each refused one as db_refused, with its SQLSTATE and headers.
func TestIngestQuarantinesWhatTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	// Random, so that the database cannot compress it below the index limit.
	rnd := make([]byte, 2000)
	_, _ = rand.Read(rnd)
	long := hex.EncodeToString(rnd)
	poisons := map[string]func(t *testing.T, i int) journal.Entry{
		// 54000: index row size exceeds btree maximum (journal_pending INCLUDEs aggregate_id).
		"4KB aggregate id": func(t *testing.T, i int) journal.Entry {
			e := goodEntry(t, i)
			e.Event.AggregateID = long
			return e
		},
		// 54000 too, on journal_type_seq.
		"4KB event type": func(t *testing.T, i int) journal.Entry {
			e := goodEntry(t, i)
			e.Event.EventType = long
			return e
		},
		// 22003: JSONB's numeric has no room for this number; Go's decoder does not mind.
		"number out of range": func(t *testing.T, i int) journal.Entry {
			return entry(t, fmt.Sprintf(`{"id":"00000000-0000-4000-8000-%012d","n":1e200000}`, i))
		},
		// 22P02 class: a lone surrogate escape, which jsonb refuses.
		"lone surrogate": func(t *testing.T, i int) journal.Entry {
			return entry(t, fmt.Sprintf(`{"id":"00000000-0000-4000-8000-%012d","s":"\ud800"}`, i))
		},
	}
	for name, poison := range poisons {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := testenv.NewDB(t)
			var b journal.Batch
			bad := map[int]bool{7: true, 8: true, 31: true}
			for i := range 40 {
				e := goodEntry(t, i)
				if bad[i] {
					e = poison(t, i)
					e.MessageID = fmt.Sprintf("msg-%d", i)
					e.Headers = func() map[string]string { return map[string]string{"message-id": e.MessageID, "x-test": "poison"} }
				}
				b.Entries = append(b.Entries, e)
			}
			res, err := journal.Ingest(context.Background(), db.Pool, b)
			if err != nil {
				t.Fatalf("ingest: %v", err)
			}
			if res.Inserted != 37 || res.Refused != 3 || res.Quarantined != 3 {
				t.Errorf("result = %+v, want 37 inserted and 3 refused", res)
			}
			if n := count(t, db.Pool, "SELECT count(*) FROM journal"); n != 37 {
				t.Errorf("journal rows = %d, want 37", n)
			}
			rows, err := db.Pool.Query(context.Background(),
				`SELECT reason, detail, message_id, headers->>'x-test', convert_from(body, 'UTF8') FROM quarantine ORDER BY message_id`)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var n int
			for rows.Next() {
				var reason, detail, msgID, hdr, body string
				if err := rows.Scan(&reason, &detail, &msgID, &hdr, &body); err != nil {
					t.Fatal(err)
				}
				n++
				if reason != string(message.ReasonDBRefused) || !strings.Contains(detail, "SQLSTATE ") || hdr != "poison" || !strings.HasPrefix(msgID, "msg-") {
					t.Errorf("quarantine row: reason=%q detail=%q message_id=%q x-test=%q", reason, detail, msgID, hdr)
				}
				if !strings.Contains(body, `"id"`) {
					t.Errorf("quarantined body %.60q is not the raw payload", body)
				}
			}
			if n != 3 {
				t.Errorf("quarantine rows = %d, want 3", n)
			}
			// Redelivered as is: the good ones are duplicates, the refused ones recorded once.
			res, err = journal.Ingest(context.Background(), db.Pool, b)
			if err != nil {
				t.Fatalf("ingest again: %v", err)
			}
			if res.Inserted != 0 || res.Duplicates != 37 {
				t.Errorf("redelivery result = %+v, want 37 duplicates", res)
			}
			if n := count(t, db.Pool, "SELECT count(*) FROM quarantine"); n != 3 {
				t.Errorf("quarantine rows after redelivery = %d, want 3", n)
			}
		})
	}
}

// TestIngestAvailabilityErrorIsNotQuarantined: when the database is away, nothing is
// quarantined and the error comes back for the caller to retry.
func TestIngestAvailabilityErrorIsNotQuarantined(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := journal.Ingest(ctx, db.Pool, journal.Batch{Entries: []journal.Entry{goodEntry(t, 1), goodEntry(t, 2)}})
	if err == nil || !journal.IsUnavailable(err) {
		t.Fatalf("ingest with a dead context: err = %v, want an availability error", err)
	}
	if n := count(t, db.Pool, "SELECT count(*) FROM quarantine"); n != 0 {
		t.Errorf("quarantine rows = %d, want 0", n)
	}
}

func TestIsUnavailable(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	tests := []struct {
		err  error
		want bool
	}{
		{pg("40001"), true}, // serialization failure
		{pg("40P01"), true}, // deadlock
		{pg("57P01"), true}, // admin shutdown
		{pg("57014"), true}, // statement timeout / cancel
		{pg("53300"), true}, // too many connections
		{pg("08006"), true}, // connection failure
		{pg("55P03"), true}, // lock not available
		{pg("25006"), true}, // read-only transaction (failover)
		{pg("42P01"), true}, // undefined table: the schema, not the row
		{pg("XX000"), true}, // internal error
		{context.DeadlineExceeded, true},
		{context.Canceled, true},
		{io.ErrUnexpectedEOF, true},
		{&net.OpError{Op: "dial", Err: errors.New("refused")}, true},
		{pg("54000"), false}, // index row too big
		{pg("22003"), false}, // numeric out of range
		{pg("22P02"), false}, // invalid text representation
		{pg("23505"), false}, // unique violation
		{pg("23514"), false}, // check violation
	}
	for _, tt := range tests {
		if got := journal.IsUnavailable(tt.err); got != tt.want {
			t.Errorf("IsUnavailable(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}
