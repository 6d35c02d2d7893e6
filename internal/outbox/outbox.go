// Package outbox is inboxd's transactional outbox: a handler writes the messages it
// wants sent (Emit) in its processing transaction, so they exist if and only if the
// event's effect committed; the relay then publishes each row to the broker,
// persistent and confirmed by a RECEIPT, and marks it sent.
//
// Delivery is at least once: a relay that dies between the broker's receipt and the
// "sent" mark publishes the row again. Every message carries the row's id in the
// outbox-id header, which a downstream inbox (inboxd included, when the body's "id" is
// the same id) uses to drop the duplicate.
//
// The package owns every statement on the outbox table. All of them run on PostgreSQL
// and CockroachDB alike, except the two named pgOnly*, which are sent to PostgreSQL only.
package outbox

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/message"
)

// HeaderOutboxID is the header carrying the outbox row id on every relayed message.
const HeaderOutboxID = "outbox-id"

// NotifyChannel is the PostgreSQL LISTEN/NOTIFY channel Emit notifies on commit.
const NotifyChannel = "inboxd_outbox"

// Limits on what Emit accepts: a message must fit a STOMP frame the broker takes
// without fuss, and a header set must stay small.
const (
	MaxBodyBytes      = 1 << 20
	MaxHeaders        = 32
	MaxHeaderNameLen  = 64
	MaxHeaderValueLen = 1024
)

// Statements on the outbox table. Durations are passed as milliseconds and cast to
// INT8: CockroachDB rejects an untyped placeholder times an INTERVAL.
const (
	sqlInsert = `INSERT INTO outbox (id, destination, headers, body) VALUES ($1::UUID, $2, $3::JSONB, $4)
		ON CONFLICT (id) DO NOTHING RETURNING id`

	// sqlClaim leases up to $1 due unsent rows for $2 ms, oldest first. SKIP LOCKED keeps
	// concurrent relays off each other's rows; the lease keeps them off afterwards, while
	// the row is being published, and hands it to another relay if this one dies.
	sqlClaim = `UPDATE outbox SET lease_until = now() + $2::INT8 * INTERVAL '1 millisecond', attempts = attempts + 1
		WHERE id IN (
			SELECT id FROM outbox
			WHERE sent_at IS NULL AND lease_until <= now()
			ORDER BY lease_until, created_at
			LIMIT $1
			FOR UPDATE SKIP LOCKED)
		RETURNING id::TEXT, destination, headers, body, attempts, created_at`

	sqlMarkSent = `UPDATE outbox SET sent_at = now(), last_error = NULL
		WHERE id = ANY($1::UUID[]) AND sent_at IS NULL`

	// sqlRelease gives claimed rows back for a retry after $2 ms, recording why.
	sqlRelease = `UPDATE outbox SET lease_until = now() + $2::INT8 * INTERVAL '1 millisecond', last_error = $3
		WHERE id = ANY($1::UUID[]) AND sent_at IS NULL`

	// sqlDeleteSent removes at most $2 rows sent more than $1 ms ago: bounded, so that
	// retention never holds long locks or builds one huge transaction.
	// sqlReleaseUntried gives back claimed rows the relay did not get to; the claim
	// counted an attempt it did not make.
	sqlReleaseUntried = `UPDATE outbox SET lease_until = now(), attempts = attempts - 1
		WHERE id = ANY($1::UUID[]) AND sent_at IS NULL`

	sqlDeleteSent = `DELETE FROM outbox WHERE id IN (
			SELECT id FROM outbox
			WHERE sent_at IS NOT NULL AND sent_at < now() - $1::INT8 * INTERVAL '1 millisecond'
			ORDER BY sent_at
			LIMIT $2)`

	sqlStats = `SELECT
			(SELECT count(*) FROM outbox WHERE sent_at IS NULL),
			(SELECT min(created_at) FROM outbox WHERE sent_at IS NULL),
			(SELECT count(*) FROM outbox WHERE sent_at IS NOT NULL),
			now()`

	sqlGet = `SELECT id::TEXT, destination, headers, body, attempts, created_at, sent_at, last_error
		FROM outbox WHERE id = $1::UUID`

	// PostgreSQL only (CockroachDB has no LISTEN/NOTIFY). NOTIFY is delivered at
	// commit, and not at all on rollback: exactly the moment the relay should wake.
	pgOnlyNotify = `SELECT pg_notify('` + NotifyChannel + `', '')`
	pgOnlyListen = `LISTEN ` + NotifyChannel
)

// Statements returns every statement that runs on both databases, by name, for tests
// that check them against CockroachDB's parser.
func Statements() map[string]string {
	return map[string]string{
		"insert": sqlInsert, "claim": sqlClaim, "markSent": sqlMarkSent, "release": sqlRelease, "releaseUntried": sqlReleaseUntried,
		"deleteSent": sqlDeleteSent, "stats": sqlStats, "get": sqlGet,
	}
}

// ErrInvalid is wrapped by every error Emit returns for a message it refuses.
var ErrInvalid = errors.New("invalid outgoing message")

// ErrDuplicateID is returned by Emit for an ID already in the outbox. The transaction
// stays usable.
var ErrDuplicateID = errors.New("outbox id already used")

// Outgoing is a message to publish once the transaction commits.
type Outgoing struct {
	// Destination is a queue or topic, e.g. "/queue/customer-events".
	Destination string
	Body        []byte
	// Headers are extra STOMP headers; "content-type" sets the content type.
	Headers map[string]string
	// ID, when set, is the outbox id (a UUID); empty means a new random one. Set it
	// from the event being processed to make the emission itself idempotent.
	ID string
}

var (
	destinationRE = regexp.MustCompile(`^/(queue|topic)/[A-Za-z0-9_.:-]{1,200}$`)
	headerNameRE  = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
)

// reserved headers are set by the relay or the STOMP layer, never by the emitter.
var reserved = map[string]bool{
	"destination": true, "receipt": true, "persistent": true, "content-length": true,
	"transaction": true, "message-id": true, HeaderOutboxID: true,
}

// Validate checks o and returns its canonical id (a new one when o.ID is empty).
func (o Outgoing) Validate() (string, error) {
	if !destinationRE.MatchString(o.Destination) {
		// No commas or wildcards: ActiveMQ would fan a message out to several destinations.
		return "", fmt.Errorf("%w: destination %q must be /queue/<name> or /topic/<name>, the name at most 200 letters, digits or _.:-", ErrInvalid, message.Truncate(o.Destination, 80))
	}
	if len(o.Body) > MaxBodyBytes {
		return "", fmt.Errorf("%w: body of %d bytes exceeds %d", ErrInvalid, len(o.Body), MaxBodyBytes)
	}
	if len(o.Headers) > MaxHeaders {
		return "", fmt.Errorf("%w: %d headers, at most %d", ErrInvalid, len(o.Headers), MaxHeaders)
	}
	for k, v := range o.Headers {
		switch {
		case len(k) == 0 || len(k) > MaxHeaderNameLen || !headerNameRE.MatchString(k):
			return "", fmt.Errorf("%w: header name %q must be 1 to %d letters, digits or _.-", ErrInvalid, message.Truncate(k, 80), MaxHeaderNameLen)
		case reserved[k]:
			return "", fmt.Errorf("%w: header %q is set by inboxd", ErrInvalid, k)
		case len(v) > MaxHeaderValueLen || !utf8.ValidString(v) || containsNUL(v):
			return "", fmt.Errorf("%w: header %q must be valid UTF-8 without NUL, at most %d bytes", ErrInvalid, k, MaxHeaderValueLen)
		}
	}
	if o.ID == "" {
		return message.NewID(), nil
	}
	id, ok := message.CanonicalUUID(o.ID)
	if !ok {
		return "", fmt.Errorf("%w: id %q is not a UUID", ErrInvalid, message.Truncate(o.ID, 80))
	}
	return id, nil
}

// DerivedID returns a name-based UUID (version 5 layout, SHA-1) for parts: the same
// parts give the same id, so a handler that runs again emits the same message id, and
// Emit reports ErrDuplicateID instead of writing a second row.
func DerivedID(parts ...string) string {
	h := sha1.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	var b [16]byte
	copy(b[:], h.Sum(nil))
	b[6] = (b[6] & 0x0f) | 0x50
	b[8] = (b[8] & 0x3f) | 0x80
	x := hex.EncodeToString(b[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

// Emit writes o to the outbox in tx and returns its id. The message is published after
// tx commits, and never if it rolls back. Invalid input wraps ErrInvalid, an id already
// used ErrDuplicateID; neither breaks tx.
func Emit(ctx context.Context, tx pgx.Tx, o Outgoing) (string, error) {
	id, err := o.Validate()
	if err != nil {
		return "", err
	}
	headers := o.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	hj, err := json.Marshal(headers)
	if err != nil {
		return "", fmt.Errorf("encoding outbox headers: %w", err)
	}
	body := o.Body
	if body == nil {
		body = []byte{}
	}
	var got string
	err = tx.QueryRow(ctx, sqlInsert, id, o.Destination, string(hj), body).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return id, fmt.Errorf("%w: %s", ErrDuplicateID, id)
	}
	if err != nil {
		return "", fmt.Errorf("writing outbox row %s: %w", id, err)
	}
	if !isCockroach(tx.Conn()) {
		if _, err := tx.Exec(ctx, pgOnlyNotify); err != nil {
			return "", fmt.Errorf("notifying the outbox relay: %w", err)
		}
	}
	return id, nil
}

// isCockroach tells CockroachDB by the crdb_version parameter it reports at connect.
func isCockroach(c *pgx.Conn) bool {
	return c != nil && c.PgConn() != nil && c.PgConn().ParameterStatus("crdb_version") != ""
}

// Row is an outbox row.
type Row struct {
	ID          string
	Destination string
	Headers     map[string]string
	Body        []byte
	Attempts    int64
	CreatedAt   time.Time
	SentAt      *time.Time
	LastError   *string
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Get returns one row; found is false when there is none.
func Get(ctx context.Context, db Querier, id string) (Row, bool, error) {
	var r Row
	var hj []byte
	err := db.QueryRow(ctx, sqlGet, id).Scan(&r.ID, &r.Destination, &hj, &r.Body, &r.Attempts, &r.CreatedAt, &r.SentAt, &r.LastError)
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, false, nil
	}
	if err != nil {
		return Row{}, false, fmt.Errorf("reading outbox row %s: %w", id, err)
	}
	if err := json.Unmarshal(hj, &r.Headers); err != nil {
		return Row{}, false, fmt.Errorf("decoding outbox row %s headers: %w", id, err)
	}
	return r, true, nil
}

// Stats describes the outbox.
type Stats struct {
	Unsent       int64
	Sent         int64 // still retained
	OldestUnsent *time.Time
	Now          time.Time // the database's clock, to compute ages with
}

// OldestUnsentAge is how long the oldest unsent row has waited; 0 when none.
func (s Stats) OldestUnsentAge() time.Duration {
	if s.OldestUnsent == nil {
		return 0
	}
	return max(0, s.Now.Sub(*s.OldestUnsent))
}

// ReadStats reads the outbox's depth and the age of its oldest unsent row.
func ReadStats(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (Stats, error) {
	var s Stats
	if err := db.QueryRow(ctx, sqlStats).Scan(&s.Unsent, &s.OldestUnsent, &s.Sent, &s.Now); err != nil {
		return Stats{}, fmt.Errorf("reading outbox stats: %w", err)
	}
	return s, nil
}
