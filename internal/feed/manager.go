package feed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// ErrNeedsCockroachDB is returned by every Manager operation on a database that is not
// CockroachDB (PostgreSQL, in tests and in PostgreSQL-only deployments).
var ErrNeedsCockroachDB = errors.New("changefeeds need CockroachDB: this database is not CockroachDB (SELECT version() does not mention it); on PostgreSQL, inboxd processes the journal without a changefeed")

// ErrFeedExists is returned by Create when a non-terminal changefeed already targets the
// same sink (host and path).
var ErrFeedExists = errors.New("a changefeed for this sink already exists")

// ErrNotFound is returned when no changefeed job matches.
var ErrNotFound = errors.New("changefeed job not found")

// Job is one changefeed job as SHOW CHANGEFEED JOBS reports it, secrets redacted.
type Job struct {
	ID            int64
	Description   string // redacted CREATE CHANGEFEED statement
	Status        string // running, paused, failed, canceled, …
	RunningStatus string // e.g. "running: resolved=…"
	HighWater     string // HLC decimal; "" before the first checkpoint
	Error         string
	SinkURI       string // redacted
}

// HighWaterTime is the wall time of the high-water mark (zero when unset): every change
// committed before it has been delivered to the sink.
func (j Job) HighWaterTime() time.Time {
	t, _ := ParseHLC(j.HighWater)
	return t
}

// Terminal reports whether the job can never run again.
func (j Job) Terminal() bool {
	switch j.Status {
	case "succeeded", "failed", "canceled", "revert-failed":
		return true
	}
	return false
}

// ParseHLC converts a decimal HLC ("1629813621680097993.0000000000") to its wall time.
func ParseHLC(s string) (time.Time, error) {
	wall, _, _ := strings.Cut(strings.TrimSpace(s), ".")
	if wall == "" {
		return time.Time{}, fmt.Errorf("parsing HLC %q: empty", s)
	}
	n, ok := new(big.Int).SetString(wall, 10)
	if !ok || n.Sign() < 0 || !n.IsInt64() {
		return time.Time{}, fmt.Errorf("parsing HLC %q: not a timestamp", s)
	}
	return time.Unix(0, n.Int64()).UTC(), nil
}

// simple sends statements unprepared: job control and cluster settings are CockroachDB
// statements we gain nothing from preparing, and every value in them is already a literal.
const simple = pgx.QueryExecModeSimpleProtocol

// Manager creates and controls the journal changefeed on CockroachDB.
type Manager struct {
	db      database.DB
	dialect database.Dialect
	log     *slog.Logger
}

// NewManager returns a manager using db, whose dialect is d (database.Detect); a nil
// logger discards.
func NewManager(db database.DB, d database.Dialect, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{db: db, dialect: d, log: logger}
}

// requireCockroach refuses every changefeed operation on a database without
// changefeeds, before it runs anything. (The TTL operations ask Dialect.RowTTL.)
func (m *Manager) requireCockroach() error {
	if !m.dialect.Changefeed() {
		return ErrNeedsCockroachDB
	}
	return nil
}

// EnableRangefeeds sets kv.rangefeed.enabled (needs the admin role).
func (m *Manager) EnableRangefeeds(ctx context.Context) error {
	if err := m.requireCockroach(); err != nil {
		return err
	}
	if _, err := m.db.Exec(ctx, EnableRangefeedsSQL, simple); err != nil {
		return fmt.Errorf("enabling rangefeeds: %w", err)
	}
	return nil
}

// List returns the changefeed jobs CockroachDB still shows (running ones and those
// finished in the last 12 hours).
func (m *Manager) List(ctx context.Context) ([]Job, error) {
	if err := m.requireCockroach(); err != nil {
		return nil, err
	}
	return m.list(ctx)
}

func (m *Manager) list(ctx context.Context) ([]Job, error) {
	rows, err := m.db.Query(ctx, showJobsSQL, simple)
	if err != nil {
		return nil, fmt.Errorf("listing changefeed jobs: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) {
		var j Job
		err := r.Scan(&j.ID, &j.Description, &j.Status, &j.RunningStatus, &j.HighWater, &j.Error, &j.SinkURI)
		j.Description = RedactStatement(j.Description)
		j.SinkURI = RedactSinkURI(j.SinkURI)
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing changefeed jobs: %w", err)
	}
	return jobs, nil
}

// Find returns the live (non-terminal) changefeed for the sink, or ErrNotFound.
func (m *Manager) Find(ctx context.Context, sinkURL string) (Job, error) {
	if err := m.requireCockroach(); err != nil {
		return Job{}, err
	}
	return m.find(ctx, sinkURL)
}

func (m *Manager) find(ctx context.Context, sinkURL string) (Job, error) {
	want := sinkIdentity(sinkURL)
	if want == "" {
		return Job{}, fmt.Errorf("%w: sink URL %q is not a webhook URL", ErrInvalidOptions, sinkURL)
	}
	jobs, err := m.list(ctx)
	if err != nil {
		return Job{}, err
	}
	for _, j := range jobs {
		// SinkURI is redacted, but redaction keeps host and path, which is all we compare.
		if !j.Terminal() && sinkIdentity(j.SinkURI) == want {
			return j, nil
		}
	}
	return Job{}, ErrNotFound
}

// Create starts the changefeed described by o and returns its job id. It refuses, with
// ErrFeedExists, when a live changefeed already targets the same sink: two feeds would
// deliver every row twice.
func (m *Manager) Create(ctx context.Context, o Options) (int64, error) {
	return m.create(ctx, o, BuildCreate)
}

// CreateOutbox starts the outbox table's changefeed (BuildOutboxCreate), o.SinkURL
// being the webhook's outbox route; like Create, it refuses a second one.
func (m *Manager) CreateOutbox(ctx context.Context, o Options) (int64, error) {
	return m.create(ctx, o, BuildOutboxCreate)
}

func (m *Manager) create(ctx context.Context, o Options, build func(Options) (string, error)) (int64, error) {
	stmt, err := build(o)
	if err != nil {
		return 0, err
	}
	if err := m.requireCockroach(); err != nil {
		return 0, err
	}
	existing, err := m.find(ctx, o.SinkURL)
	switch {
	case err == nil:
		return 0, fmt.Errorf("%w: job %d (%s) posts to %s", ErrFeedExists, existing.ID, existing.Status, existing.SinkURI)
	case !errors.Is(err, ErrNotFound):
		return 0, err
	}
	var id int64
	if err := m.db.QueryRow(ctx, stmt, simple).Scan(&id); err != nil {
		return 0, fmt.Errorf("creating changefeed (%s): %w", RedactStatement(stmt), err)
	}
	m.log.InfoContext(ctx, "changefeed created", "job_id", id, "sink", RedactSinkURI(o.SinkURL), "mode", o.withDefaults().Mode)
	return id, nil
}

// Status returns one changefeed job, or ErrNotFound.
func (m *Manager) Status(ctx context.Context, id int64) (Job, error) {
	if err := m.requireCockroach(); err != nil {
		return Job{}, err
	}
	jobs, err := m.list(ctx)
	if err != nil {
		return Job{}, err
	}
	for _, j := range jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return Job{}, fmt.Errorf("%w: job %d", ErrNotFound, id)
}

// Pause pauses a changefeed job.
func (m *Manager) Pause(ctx context.Context, id int64) error {
	return m.control(ctx, "pausing", PauseJobSQL(id))
}

// Resume resumes a paused changefeed job.
func (m *Manager) Resume(ctx context.Context, id int64) error {
	return m.control(ctx, "resuming", ResumeJobSQL(id))
}

// Cancel cancels a changefeed job.
func (m *Manager) Cancel(ctx context.Context, id int64) error {
	return m.control(ctx, "canceling", CancelJobSQL(id))
}

func (m *Manager) control(ctx context.Context, what, stmt string) error {
	if err := m.requireCockroach(); err != nil {
		return err
	}
	if _, err := m.db.Exec(ctx, stmt, simple); err != nil {
		return fmt.Errorf("%s changefeed (%s): %w", what, stmt, err)
	}
	m.log.InfoContext(ctx, "changefeed job control", "statement", stmt)
	return nil
}
