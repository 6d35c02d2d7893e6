package journal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/backoff"
	"github.com/inboxd/inboxd/internal/buildinfo"
)

// ErrSchemaContracted is what a statement of this release gets once a newer release
// has contracted the schema under it (the state move's second step, v0.3.0): the
// journal's state columns, which this release reads and writes, are gone. Nothing can
// be claimed or settled any more; the statements fail and roll back, so no event is
// recorded without its handler's effect, nor the other way round. Only an upgrade helps.
// Test for it with IsSchemaContracted, which also recognises the database's own error.
var ErrSchemaContracted = errors.New("the database schema was contracted by a newer inboxd release " +
	"(the journal's state columns are gone): this instance (" + buildinfo.Version + ") cannot process events; upgrade it")

// stateColumn matches the message of SQLSTATE 42703 (undefined_column) for one of the
// journal's state columns, the ones the contract drops: PostgreSQL's
// `column "status" does not exist`, `column j.status does not exist` (qualified) and
// `column "status" of relation "journal" does not exist` (an INSERT's or an UPDATE's
// target), and CockroachDB's `column "status" does not exist` and
// `column "j.status" does not exist`. CockroachDB answers 42703 too, for a column that
// is gone and for one whose DROP COLUMN is still under way (no longer public):
// colinfo.NewUndefinedColumnError, pgcode.UndefinedColumn, in
// https://github.com/cockroachdb/cockroach/blob/master/pkg/sql/catalog/colinfo/column_resolver.go
// (ProcessTargetColumns and the column resolver). Another undefined column (a handler's
// own table) is not a contraction: its statement is the handler's failure.
var stateColumn = regexp.MustCompile(`^column "?(?:[a-z_0-9]+\.)?` +
	`(?:status|attempts|last_error|next_attempt_at|updated_at|processed_at|skipped_by|skipped_at|last_started_at|last_duration_ms)` +
	`"?(?: of relation "journal")? does not exist`)

// IsSchemaContracted reports whether err says a newer release contracted the schema
// under this one: ErrSchemaContracted, or the database's 42703 for a journal state
// column. It is the one place that classifies the database's answer.
//
// Two other answers are not the contraction's, or not yet: pgx's statement cache turns a
// prepared statement whose result columns changed into 0A000 "cached plan must not
// change result type" once, then forgets the statement (pgx v5 invalidates a cached
// statement on any error), so its next run is prepared anew and gets 42703 if a column
// it names is gone; and 42P01 (undefined_table) is not what the state move does, which
// keeps the journal table.
func IsSchemaContracted(err error) bool {
	if errors.Is(err, ErrSchemaContracted) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42703" && stateColumn.MatchString(pgErr.Message)
}

// ContractedBackoff paces the loops that found the schema contracted: nothing they try
// can work again before this instance is replaced, so they try seldom, not at their
// interval or on every kick; trying at all tells /readyz and the log when it is so.
var ContractedBackoff = backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Jitter: 0.2}

// Contraction is an instance's one report of a contracted schema: every part that finds
// it reports it here, the first report is logged, once, at ERROR (the instance can do
// nothing useful until it is upgraded, and someone must do that), and /readyz says so
// from then on. The parts log nothing of their own for it. A contraction is not undone:
// the instance stays not ready until it is replaced. The zero value logs nothing; a nil
// *Contraction only classifies.
type Contraction struct {
	Log *slog.Logger

	mu  sync.Mutex
	err error // the first report, nil before it
}

// Report reports whether err says the schema was contracted (IsSchemaContracted), and
// logs the first such err, once per instance.
func (c *Contraction) Report(err error) bool {
	if !IsSchemaContracted(err) {
		return false
	}
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return true
	}
	c.err = fmt.Errorf("%w: %w", ErrSchemaContracted, err)
	if c.Log != nil {
		c.Log.Error("the database schema was contracted by a newer inboxd release: this instance stops processing "+
			"(nothing is lost: unjournaled messages stay unacked for the broker to redeliver, and no handler commits) "+
			"and must be upgraded or replaced", "version", buildinfo.Version, "err", err)
	}
	return true
}

// Err is the contraction reported, or nil.
func (c *Contraction) Err() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// ReadyCheck is the /readyz check of the contraction: it fails once one was reported.
func (c *Contraction) ReadyCheck(context.Context) error { return c.Err() }
