package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// ErrNotFound is returned when the journal entry or quarantine row does not exist.
var ErrNotFound = errors.New("not found")

// Record is one journal row with its processing history.
type Record struct {
	ID            string
	EventType     string
	AggregateID   string
	SequenceNo    int64
	Tag           string
	Status        Status
	Attempts      int
	LastError     *string
	NextAttemptAt time.Time
	ReceivedAt    time.Time
	UpdatedAt     time.Time
	ProcessedAt   *time.Time
	Payload       json.RawMessage
	// SkippedBy and SkippedAt record who skipped a DEAD entry, letting its aggregate's
	// successors run on (see Skip); nil for an entry never skipped.
	SkippedBy *string
	SkippedAt *time.Time
}

// Filter selects journal entries. Zero fields do not filter.
type Filter struct {
	EventType string
	Statuses  []Status
	// Contains is a JSON object the payload must contain (payload @> Contains), which the
	// GIN (inverted on CockroachDB) index on payload serves.
	Contains json.RawMessage
	Since    time.Time // received_at >= Since
	Until    time.Time // received_at < Until
}

// IsZero reports whether the filter selects every entry.
func (f Filter) IsZero() bool {
	return f.EventType == "" && len(f.Statuses) == 0 && !hasContains(f.Contains) && f.Since.IsZero() && f.Until.IsZero()
}

func hasContains(c json.RawMessage) bool {
	s := strings.TrimSpace(string(c))
	return s != "" && s != "{}" && s != "null"
}

// Page is a keyset page over sequence_no: never OFFSET, so a page costs the same
// wherever it is and rows inserted meanwhile neither shift nor repeat pages. A
// sequence number is drawn before its row commits, so a row still committing (an
// ingest batch takes milliseconds) can land behind a cursor already handed out; a
// client tailing the journal with order=asc should re-read its last few seconds.
type Page struct {
	Limit int
	Desc  bool
	// After is the sequence_no of the previous page's last row; nil starts at the newest
	// (Desc) or oldest entry.
	After *int64
}

// recordColumns are a Record's columns: the entry's from j (journal), its state's from s
// (journal_state), the two joined by id (recordFrom).
const recordColumns = `j.id::TEXT, j.event_type, j.aggregate_id, j.sequence_no, j.tag, s.status, s.attempts, s.last_error,
	s.next_attempt_at, j.received_at, s.updated_at, s.processed_at, j.payload, s.skipped_by, s.skipped_at`

// recordFrom is what recordColumns read: every entry has exactly one state row, written
// with it by ingest.
const recordFrom = `journal_state AS s JOIN journal AS j ON j.id = s.id`

func scanRecord(row pgx.Row) (Record, error) {
	var r Record
	var payload []byte
	err := row.Scan(&r.ID, &r.EventType, &r.AggregateID, &r.SequenceNo, &r.Tag, &r.Status, &r.Attempts, &r.LastError,
		&r.NextAttemptAt, &r.ReceivedAt, &r.UpdatedAt, &r.ProcessedAt, &payload, &r.SkippedBy, &r.SkippedAt)
	r.Payload = payload
	return r, err
}

// where builds the WHERE conditions of f over recordFrom (j the journal, s the state),
// appending their arguments to args. Only the given criteria appear in the SQL, so the
// planner sees exactly what it can use.
func where(f Filter, args *[]any) []string {
	arg := func(v any) string {
		*args = append(*args, v)
		return "$" + strconv.Itoa(len(*args))
	}
	var conds []string
	if f.EventType != "" {
		conds = append(conds, "j.event_type = "+arg(f.EventType))
	}
	if len(f.Statuses) > 0 {
		conds = append(conds, "s.status = ANY ("+arg(StatusText(f.Statuses))+"::TEXT[])")
	}
	if hasContains(f.Contains) {
		conds = append(conds, "j.payload @> "+arg(string(f.Contains))+"::JSONB")
	}
	if !f.Since.IsZero() {
		conds = append(conds, "j.received_at >= "+arg(f.Since)+"::TIMESTAMPTZ")
	}
	if !f.Until.IsZero() {
		conds = append(conds, "j.received_at < "+arg(f.Until)+"::TIMESTAMPTZ")
	}
	return conds
}

func whereClause(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

// List returns up to p.Limit entries matching f in sequence_no order, and whether more follow.
func List(ctx context.Context, db database.DB, f Filter, p Page) ([]Record, bool, error) {
	if p.Limit <= 0 {
		return nil, false, fmt.Errorf("listing journal: limit must be positive, got %d", p.Limit)
	}
	sql, args := listSQL(f, p)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, false, fmt.Errorf("listing journal: %w", err)
	}
	defer rows.Close()
	out := make([]Record, 0, p.Limit)
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, false, fmt.Errorf("listing journal: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("listing journal: %w", err)
	}
	more := len(out) > p.Limit
	if more {
		out = out[:p.Limit]
	}
	return out, more, nil
}

// listSQL builds List's statement: only the criteria given appear in it.
func listSQL(f Filter, p Page) (string, []any) {
	var args []any
	conds := where(f, &args)
	dir, cmp := "ASC", ">"
	if p.Desc {
		dir, cmp = "DESC", "<"
	}
	seq := seqColumn(f)
	if p.After != nil {
		args = append(args, *p.After)
		conds = append(conds, fmt.Sprintf("%s %s $%d::INT8", seq, cmp, len(args)))
	}
	args = append(args, p.Limit+1)
	return "SELECT " + recordColumns + " FROM " + recordFrom + whereClause(conds) +
		fmt.Sprintf(" ORDER BY %s %s LIMIT $%d::INT8", seq, dir, len(args)), args
}

// seqColumn is the sequence_no a listing of f orders and pages by: journal_state's copy
// when f filters by status (journal_state_attention is (status, sequence_no)), else the
// journal's (journal_type_seq is (event_type, sequence_no)). The two are equal.
func seqColumn(f Filter) string {
	if len(f.Statuses) > 0 {
		return "s.sequence_no"
	}
	return "j.sequence_no"
}

// Get returns one journal entry by event id (a canonical UUID string).
func Get(ctx context.Context, db database.DB, id string) (Record, error) {
	r, err := scanRecord(db.QueryRow(ctx, "SELECT "+recordColumns+" FROM "+recordFrom+" WHERE j.id = $1::UUID", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("reading journal entry %s: %w", id, err)
	}
	return r, nil
}

// Watermark is the changefeed's latest resolved timestamp for one sink.
type Watermark struct {
	Sink       string
	Resolved   string
	ResolvedAt time.Time
	UpdatedAt  time.Time
	Lag        time.Duration // database now() - ResolvedAt
}

// FeedWatermarks reads the feed_watermark table (written by the feed, only read here).
func FeedWatermarks(ctx context.Context, db database.DB) ([]Watermark, error) {
	rows, err := db.Query(ctx, `SELECT sink, resolved, resolved_at, updated_at, now() FROM feed_watermark ORDER BY sink`)
	if err != nil {
		return nil, fmt.Errorf("reading feed watermarks: %w", err)
	}
	defer rows.Close()
	var out []Watermark
	for rows.Next() {
		var w Watermark
		var now time.Time
		if err := rows.Scan(&w.Sink, &w.Resolved, &w.ResolvedAt, &w.UpdatedAt, &now); err != nil {
			return nil, fmt.Errorf("reading feed watermarks: %w", err)
		}
		w.Lag = now.Sub(w.ResolvedAt)
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading feed watermarks: %w", err)
	}
	return out, nil
}

// QuarantineRecord is one quarantine row without its body.
type QuarantineRecord struct {
	ID           string
	Reason       string
	Detail       string
	Destination  string
	MessageID    string
	Headers      map[string]string
	EventID      *string
	ReceivedAt   time.Time
	ReinjectedAt *time.Time
	Size         int64
}

// QuarantineKey is the keyset position of a quarantine row.
type QuarantineKey struct {
	ReceivedAt time.Time
	ID         string
}

// QuarantinePage is a keyset page over (received_at, id), the quarantine_received index.
type QuarantinePage struct {
	Limit int
	Desc  bool
	After *QuarantineKey
}

const quarantineColumns = `id::TEXT, reason, detail, destination, message_id, headers, event_id::TEXT,
	received_at, reinjected_at, octet_length(body)`

func scanQuarantine(row pgx.Row, extra ...any) (QuarantineRecord, error) {
	var q QuarantineRecord
	var headers []byte
	dest := append([]any{&q.ID, &q.Reason, &q.Detail, &q.Destination, &q.MessageID, &headers, &q.EventID,
		&q.ReceivedAt, &q.ReinjectedAt, &q.Size}, extra...)
	if err := row.Scan(dest...); err != nil {
		return q, err
	}
	if len(headers) > 0 {
		// Headers were written by Ingest as a JSON object of strings; anything else is ignored.
		_ = json.Unmarshal(headers, &q.Headers)
	}
	return q, nil
}

// ListQuarantine returns up to p.Limit quarantine rows, optionally of one reason, and
// whether more follow.
func ListQuarantine(ctx context.Context, db database.DB, reason string, p QuarantinePage) ([]QuarantineRecord, bool, error) {
	if p.Limit <= 0 {
		return nil, false, fmt.Errorf("listing quarantine: limit must be positive, got %d", p.Limit)
	}
	sql, args := listQuarantineSQL(reason, p)
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, false, fmt.Errorf("listing quarantine: %w", err)
	}
	defer rows.Close()
	out := make([]QuarantineRecord, 0, p.Limit)
	for rows.Next() {
		q, err := scanQuarantine(rows)
		if err != nil {
			return nil, false, fmt.Errorf("listing quarantine: %w", err)
		}
		out = append(out, q)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("listing quarantine: %w", err)
	}
	more := len(out) > p.Limit
	if more {
		out = out[:p.Limit]
	}
	return out, more, nil
}

// listQuarantineSQL builds ListQuarantine's statement.
func listQuarantineSQL(reason string, p QuarantinePage) (string, []any) {
	var args []any
	var conds []string
	if reason != "" {
		args = append(args, reason)
		conds = append(conds, "reason = $1::TEXT")
	}
	dir, cmp := "ASC", ">"
	if p.Desc {
		dir, cmp = "DESC", "<"
	}
	if p.After != nil {
		args = append(args, p.After.ReceivedAt, p.After.ID)
		conds = append(conds, fmt.Sprintf("(received_at, id) %s ($%d::TIMESTAMPTZ, $%d::UUID)", cmp, len(args)-1, len(args)))
	}
	args = append(args, p.Limit+1)
	return "SELECT " + quarantineColumns + " FROM quarantine" + whereClause(conds) +
		fmt.Sprintf(" ORDER BY received_at %s, id %s LIMIT $%d::INT8", dir, dir, len(args)), args
}

// QuarantineBody returns one quarantine row and its raw body.
func QuarantineBody(ctx context.Context, db database.DB, id string) (QuarantineRecord, []byte, error) {
	var body []byte
	q, err := scanQuarantine(db.QueryRow(ctx, "SELECT "+quarantineColumns+", body FROM quarantine WHERE id = $1::UUID", id), &body)
	if errors.Is(err, pgx.ErrNoRows) {
		return QuarantineRecord{}, nil, ErrNotFound
	}
	if err != nil {
		return QuarantineRecord{}, nil, fmt.Errorf("reading quarantine row %s: %w", id, err)
	}
	return q, body, nil
}
