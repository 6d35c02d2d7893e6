package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
)

// Replay runs (tables replay_run, replay_item, replay_hold; migration 0019). A plan is
// stored frozen (InsertReplayRun), started (StartReplayRun), then run item by item, each
// in the transaction that runs its handler (LockReplayItem … FinishReplayItem).

// The states of a replay run.
const (
	RunPlanned   = "planned"
	RunRunning   = "running"
	RunPaused    = "paused"
	RunCancelled = "cancelled"
	RunDone      = "done"
)

// The states of a replay item.
const (
	ItemPending = "pending"
	ItemDone    = "done"
	ItemDead    = "dead"
)

// ErrRunNotFound is the error for a replay run that does not exist.
var ErrRunNotFound = errors.New("replay run not found")

// ErrRunState is the error for a change a run's state does not allow (starting a run
// already started, resuming one that is not paused, …).
var ErrRunState = errors.New("replay run is not in a state that allows this")

// ReplayRun is a stored replay run.
type ReplayRun struct {
	ID, State, Reason, StartedBy   string
	CreatedAt                      time.Time
	StartedAt, FinishedAt          *time.Time
	Selection                      json.RawMessage
	Tail                           bool
	Events, Selected, AddedByTail  int64
	Aggregates                     int64
	Types                          map[string]int64
	Publish                        bool
	Rate                           float64
	Pending, Done, Dead, Attempted int64 // item counts (ReplayRunStatus)
}

const sqlInsertReplayRun = `INSERT INTO replay_run (id, selection, tail, events, selected_events, tail_events, aggregates, types)
	VALUES ($1::UUID, $2::JSONB, $3::BOOL, $4::INT8, $5::INT8, $6::INT8, $7::INT8, $8::JSONB)`

// sqlInsertReplayItems writes a chunk of a plan's items from parallel arrays.
const sqlInsertReplayItems = `INSERT INTO replay_item (run_id, position, event_id, aggregate_id, selected)
	SELECT $1::UUID, u.p, u.e, u.a, u.s
	FROM unnest($2::INT8[], $3::UUID[], $4::TEXT[], $5::BOOL[]) AS u(p, e, a, s)`

// itemChunk bounds the items one INSERT writes.
const itemChunk = 5000

// InsertReplayRun stores run (its id, selection and counts) and its items, in order,
// in tx: the frozen plan.
func InsertReplayRun(ctx context.Context, tx pgx.Tx, run ReplayRun, items []PlanItem) error {
	types, err := json.Marshal(run.Types)
	if err != nil {
		return fmt.Errorf("encoding a replay plan's types: %w", err)
	}
	if _, err := tx.Exec(ctx, sqlInsertReplayRun, run.ID, string(run.Selection), run.Tail, run.Events, run.Selected,
		run.AddedByTail, run.Aggregates, string(types)); err != nil {
		return fmt.Errorf("storing a replay plan: %w", err)
	}
	for start := 0; start < len(items); start += itemChunk {
		chunk := items[start:min(start+itemChunk, len(items))]
		pos := make([]int64, len(chunk))
		ids := make([]string, len(chunk))
		aggs := make([]string, len(chunk))
		sel := make([]bool, len(chunk))
		for i, it := range chunk {
			pos[i], ids[i], aggs[i], sel[i] = int64(start+i), it.ID, it.AggregateID, it.Selected
		}
		if _, err := tx.Exec(ctx, sqlInsertReplayItems, run.ID, pos, ids, aggs, sel); err != nil {
			return fmt.Errorf("storing a replay plan's events: %w", err)
		}
	}
	return nil
}

const replayRunColumns = `id::TEXT, state, reason, started_by, created_at, started_at, finished_at, selection::TEXT, tail,
	events, selected_events, tail_events, aggregates, types::TEXT, publish, rate`

const sqlGetReplayRun = `SELECT ` + replayRunColumns + ` FROM replay_run WHERE id = $1::UUID`

// sqlReplayItemCounts counts a run's items by state, and the attempts made.
const sqlReplayItemCounts = `SELECT
	count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'done'),
	count(*) FILTER (WHERE state = 'dead'), COALESCE(sum(attempts), 0)::INT8
	FROM replay_item WHERE run_id = $1::UUID`

// GetReplayRun reads a run and, with counts, its item counts.
func GetReplayRun(ctx context.Context, db database.DB, id string, counts bool) (ReplayRun, error) {
	var r ReplayRun
	var sel, types string
	err := db.QueryRow(ctx, sqlGetReplayRun, id).Scan(&r.ID, &r.State, &r.Reason, &r.StartedBy, &r.CreatedAt, &r.StartedAt,
		&r.FinishedAt, &sel, &r.Tail, &r.Events, &r.Selected, &r.AddedByTail, &r.Aggregates, &types, &r.Publish, &r.Rate)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("%w: %s", ErrRunNotFound, id)
	}
	if err != nil {
		return r, fmt.Errorf("reading replay run %s: %w", id, err)
	}
	r.Selection = json.RawMessage(sel)
	if err := json.Unmarshal([]byte(types), &r.Types); err != nil {
		return r, fmt.Errorf("reading replay run %s's types: %w", id, err)
	}
	if counts {
		if err := db.QueryRow(ctx, sqlReplayItemCounts, id).Scan(&r.Pending, &r.Done, &r.Dead, &r.Attempted); err != nil {
			return r, fmt.Errorf("counting replay run %s's events: %w", id, err)
		}
	}
	return r, nil
}

// sqlListReplayRuns reads the newest runs, of one state when $1 is not empty.
// replay_run holds one row per plan, and retention deletes those that ended long ago.
const sqlListReplayRuns = `SELECT ` + replayRunColumns + ` FROM replay_run
	WHERE $1::TEXT = '' OR state = $1::TEXT
	ORDER BY created_at DESC, id DESC
	LIMIT $2::INT8`

// MaxListReplayRuns bounds the runs ListReplayRuns returns.
const MaxListReplayRuns = 100

// ListReplayRuns returns up to limit runs (at most MaxListReplayRuns), newest first, of
// state when it is not empty, each with its item counts (as GetReplayRun with counts).
func ListReplayRuns(ctx context.Context, db database.DB, state string, limit int) ([]ReplayRun, error) {
	limit = min(max(limit, 1), MaxListReplayRuns)
	rows, err := db.Query(ctx, sqlListReplayRuns, state, limit)
	if err != nil {
		return nil, fmt.Errorf("listing replay runs: %w", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ReplayRun, error) {
		var r ReplayRun
		var sel, types string
		if err := row.Scan(&r.ID, &r.State, &r.Reason, &r.StartedBy, &r.CreatedAt, &r.StartedAt, &r.FinishedAt, &sel,
			&r.Tail, &r.Events, &r.Selected, &r.AddedByTail, &r.Aggregates, &types, &r.Publish, &r.Rate); err != nil {
			return r, err
		}
		r.Selection = json.RawMessage(sel)
		return r, json.Unmarshal([]byte(types), &r.Types)
	})
	if err != nil {
		return nil, fmt.Errorf("listing replay runs: %w", err)
	}
	for i := range runs {
		r := &runs[i]
		if err := db.QueryRow(ctx, sqlReplayItemCounts, r.ID).Scan(&r.Pending, &r.Done, &r.Dead, &r.Attempted); err != nil {
			return nil, fmt.Errorf("counting replay run %s's events: %w", r.ID, err)
		}
	}
	return runs, nil
}

const sqlStartReplayRun = `UPDATE replay_run SET state = 'running', reason = $2::TEXT, started_by = $3::TEXT,
	rate = $4::FLOAT8, publish = $5::BOOL, started_at = now()
	WHERE id = $1::UUID AND state = 'planned' RETURNING 1`

// sqlHoldReplayAggregates puts the run's aggregates under replay: their live events
// wait (see HoldCheck). Events without an aggregate (”) are held by nothing.
const sqlHoldReplayAggregates = `INSERT INTO replay_hold (aggregate_id, run_id)
	SELECT DISTINCT aggregate_id, run_id FROM replay_item
	WHERE run_id = $1::UUID AND state <> 'done' AND aggregate_id <> ''
	ON CONFLICT (aggregate_id, run_id) DO NOTHING`

// StartReplayRun starts a planned run with its options and holds its aggregates, in
// one transaction.
func StartReplayRun(ctx context.Context, db database.DB, id, reason, startedBy string, rate float64, publish bool) error {
	return inReplayTx(ctx, db, func(tx pgx.Tx) error {
		if err := changeRun(ctx, tx, id, sqlStartReplayRun, reason, startedBy, rate, publish); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlHoldReplayAggregates, id); err != nil {
			return fmt.Errorf("holding replay run %s's aggregates: %w", id, err)
		}
		return nil
	})
}

const (
	sqlPauseReplayRun  = `UPDATE replay_run SET state = 'paused' WHERE id = $1::UUID AND state = 'running' RETURNING 1`
	sqlResumeReplayRun = `UPDATE replay_run SET state = 'running' WHERE id = $1::UUID AND state = 'paused' RETURNING 1`
	sqlCancelReplayRun = `UPDATE replay_run SET state = 'cancelled', finished_at = now()
		WHERE id = $1::UUID AND state IN ('planned', 'running', 'paused') RETURNING 1`
	sqlReleaseReplayRun = `DELETE FROM replay_hold WHERE run_id = $1::UUID AND aggregate_id IN
		(SELECT DISTINCT aggregate_id FROM replay_item WHERE run_id = $1::UUID)`
)

// PauseReplayRun pauses a running run: its runner stops before its next event. Its
// aggregates stay held: their replay is not done.
func PauseReplayRun(ctx context.Context, db database.DB, id string) error {
	return changeRun(ctx, db, id, sqlPauseReplayRun)
}

// ResumeReplayRun resumes a paused run.
func ResumeReplayRun(ctx context.Context, db database.DB, id string) error {
	return changeRun(ctx, db, id, sqlResumeReplayRun)
}

// CancelReplayRun cancels a run that has not ended and releases its aggregates: their
// live events flow again, with the items not yet replayed left pending.
func CancelReplayRun(ctx context.Context, db database.DB, id string) error {
	return inReplayTx(ctx, db, func(tx pgx.Tx) error {
		if err := changeRun(ctx, tx, id, sqlCancelReplayRun); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlReleaseReplayRun, id); err != nil {
			return fmt.Errorf("releasing replay run %s's aggregates: %w", id, err)
		}
		return nil
	})
}

// changeRun runs one of the state changes above, telling a missing run from one whose
// state does not allow it.
func changeRun(ctx context.Context, db database.DB, id, sql string, args ...any) error {
	var one int
	err := db.QueryRow(ctx, sql, append([]any{id}, args...)...).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		r, gerr := GetReplayRun(ctx, db, id, false)
		if gerr != nil {
			return gerr
		}
		return fmt.Errorf("%w: run %s is %s", ErrRunState, id, r.State)
	}
	if err != nil {
		return fmt.Errorf("changing replay run %s: %w", id, err)
	}
	return nil
}

func inReplayTx(ctx context.Context, db database.DB, f func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning a replay run's transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing a replay run's transaction: %w", err)
	}
	return nil
}

// ReplayItem is one event of a stored plan.
type ReplayItem struct {
	RunID       string
	Position    int64
	EventID     string
	AggregateID string
	Attempts    int
}

// sqlNextReplayItems reads the run's next items that may run now, in journal order:
// pending, due (a failed one waits its backoff), and with no earlier item of their
// aggregate not done, so that an aggregate's items run in journal order and a dead one
// holds the rest of its aggregate. The probe goes through replay_item_aggregate.
const sqlNextReplayItems = `SELECT i.run_id::TEXT, i.position, i.event_id::TEXT, i.aggregate_id, i.attempts
	FROM replay_item AS i
	WHERE i.run_id = $1::UUID AND i.state = 'pending' AND i.next_at <= now()
	  AND NOT EXISTS (SELECT 1 FROM replay_item AS p
		WHERE p.run_id = i.run_id AND p.aggregate_id = i.aggregate_id AND p.position < i.position
		  AND p.state <> 'done')
	ORDER BY i.position
	LIMIT $2::INT8`

// NextReplayItems returns up to limit items of run that may run now (sqlNextReplayItems).
func NextReplayItems(ctx context.Context, db database.DB, run string, limit int) ([]ReplayItem, error) {
	rows, err := db.Query(ctx, sqlNextReplayItems, run, limit)
	if err != nil {
		return nil, fmt.Errorf("reading replay run %s's next events: %w", run, err)
	}
	defer rows.Close()
	var out []ReplayItem
	for rows.Next() {
		var it ReplayItem
		if err := rows.Scan(&it.RunID, &it.Position, &it.EventID, &it.AggregateID, &it.Attempts); err != nil {
			return nil, fmt.Errorf("reading replay run %s's next events: %w", run, err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("reading replay run %s's next events: %w", run, err)
	}
	return out, nil
}

// sqlLockReplayItem locks an item by key for the transaction that replays it and reads
// its state: a transaction that finds it no longer pending (a runner before a crash, or
// another runner, committed it) replays nothing. On PostgreSQL FOR UPDATE waits for a
// transaction holding the row and then reads its committed version; on CockroachDB,
// SELECT FOR UPDATE takes an exclusive lock on the row read by key, and a concurrent
// transaction waits for it (https://www.cockroachlabs.com/docs/stable/select-for-update).
const sqlLockReplayItem = `SELECT state, attempts FROM replay_item
	WHERE run_id = $1::UUID AND position = $2::INT8 FOR UPDATE`

// LockReplayItem locks it in tx and returns its state and attempts.
func LockReplayItem(ctx context.Context, tx pgx.Tx, it ReplayItem) (state string, attempts int, err error) {
	if err := tx.QueryRow(ctx, sqlLockReplayItem, it.RunID, it.Position).Scan(&state, &attempts); err != nil {
		return "", 0, fmt.Errorf("locking replay item %s/%d: %w", it.RunID, it.Position, err)
	}
	return state, attempts, nil
}

// sqlLockAggregatePending locks the aggregate's pending journal entries, waiting for a
// live transaction that claimed one of them before the run held the aggregate: a
// replayed event of the aggregate then commits after it, never between two replayed
// ones. It locks their state rows (journal_state), which claims lock. (Claims lock the
// head entry's FOR UPDATE, see lockHeadsSQL; a claim that starts
// after the hold sees it and skips the aggregate.)
const sqlLockAggregatePending = `SELECT id FROM journal_state
	WHERE aggregate_id = $1::TEXT AND status IN ('RECEIVED', 'FAILED')
	ORDER BY sequence_no FOR UPDATE`

// LockAggregatePending locks the aggregate's pending entries in tx (sqlLockAggregatePending).
func LockAggregatePending(ctx context.Context, tx pgx.Tx, aggregate string) error {
	if aggregate == "" {
		return nil
	}
	rows, err := tx.Query(ctx, sqlLockAggregatePending, aggregate)
	if err != nil {
		return fmt.Errorf("locking aggregate %q's pending events: %w", aggregate, err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("locking aggregate %q's pending events: %w", aggregate, err)
	}
	return nil
}

// ReplayResult is what one replay attempt of an item did, recorded with it.
type ReplayResult struct {
	Outcome   Status // PROCESSED, REJECTED, FAILED or DEAD
	Error     string
	StartedAt time.Time
	Took      time.Duration
	Runs      int
	Backoff   time.Duration // FAILED: the wait before the next attempt
}

const sqlFinishReplayItem = `UPDATE replay_item SET state = $3::TEXT, attempts = attempts + 1, outcome = $4::TEXT,
	error = $5::TEXT, at = now(), next_at = now() + $6::INT8 * INTERVAL '1 millisecond'
	WHERE run_id = $1::UUID AND position = $2::INT8`

// sqlReplayAttempt records the attempt in the event's history with the run's id.
const sqlReplayAttempt = `INSERT INTO journal_attempt (journal_id, attempt, started_at, duration_ms, runs, outcome, error, replay_run)
	VALUES ($1::UUID, $2::INT8, $3::TIMESTAMPTZ, $4::INT8, $5::INT8, $6::TEXT, $7::TEXT, $8::UUID)`

// sqlReleaseReplayAggregate ends the hold of an aggregate whose items of the run are
// all done.
const sqlReleaseReplayAggregate = `DELETE FROM replay_hold WHERE aggregate_id = $2::TEXT AND run_id = $1::UUID
	AND NOT EXISTS (SELECT 1 FROM replay_item WHERE run_id = $1::UUID AND aggregate_id = $2::TEXT AND state <> 'done')`

// FinishReplayItem records one attempt of it in tx, the transaction that ran its
// handler: the item's new state (done when processed or rejected, dead past the retry
// policy, else pending until its backoff), the attempt in the journal's history with
// the run, and, once the aggregate's items are all done, the end of its hold.
func FinishReplayItem(ctx context.Context, tx pgx.Tx, it ReplayItem, attempt int, res ReplayResult) error {
	state := ItemPending
	switch res.Outcome {
	case StatusProcessed, StatusRejected:
		state = ItemDone
	case StatusDead:
		state = ItemDead
	}
	var errText *string
	if res.Error != "" {
		errText = &res.Error
	}
	b := &pgx.Batch{}
	b.Queue(sqlFinishReplayItem, it.RunID, it.Position, state, string(res.Outcome), errText, res.Backoff.Milliseconds())
	b.Queue(sqlReplayAttempt, it.EventID, attempt, res.StartedAt, res.Took.Milliseconds(), max(res.Runs, 1),
		string(res.Outcome), errText, it.RunID)
	if state == ItemDone && it.AggregateID != "" {
		b.Queue(sqlReleaseReplayAggregate, it.RunID, it.AggregateID)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("recording replay item %s/%d: %w", it.RunID, it.Position, err)
	}
	return nil
}

// sqlFinishReplayRun ends a running run with nothing left pending or dead.
const sqlFinishReplayRun = `UPDATE replay_run SET state = 'done', finished_at = now()
	WHERE id = $1::UUID AND state = 'running'
	  AND NOT EXISTS (SELECT 1 FROM replay_item WHERE run_id = $1::UUID AND state <> 'done')
	RETURNING 1`

// FinishReplayRun marks run done if all its items are; done tells whether it did.
func FinishReplayRun(ctx context.Context, db database.DB, run string) (done bool, err error) {
	var one int
	err = db.QueryRow(ctx, sqlFinishReplayRun, run).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("finishing replay run %s: %w", run, err)
	}
	return true, nil
}

const sqlRunningReplayRuns = `SELECT id::TEXT FROM replay_run WHERE state = 'running' ORDER BY created_at LIMIT 100`

// RunningReplayRuns lists the runs a runner should run (after a restart, say).
func RunningReplayRuns(ctx context.Context, db database.DB) ([]string, error) {
	rows, err := db.Query(ctx, sqlRunningReplayRuns)
	if err != nil {
		return nil, fmt.Errorf("listing running replay runs: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("listing running replay runs: %w", err)
	}
	return ids, nil
}

// ErrRunLeased is the error for a running run another runner holds the lease of.
var ErrRunLeased = errors.New("replay run is being run by another runner")

// sqlLeaseReplayRun takes or renews the lease of a running run for owner, unless
// another runner holds one that has not expired. It returns nothing otherwise. One
// statement by key: on CockroachDB the UPDATE's read and write of the row are one
// serializable step, and of two runners racing, one waits or restarts and then sees
// the other's lease (https://www.cockroachlabs.com/docs/stable/update).
const sqlLeaseReplayRun = `UPDATE replay_run SET runner = $2::TEXT, runner_until = now() + $3::INT8 * INTERVAL '1 millisecond'
	WHERE id = $1::UUID AND state = 'running'
	  AND (runner IS NULL OR runner = $2::TEXT OR runner_until IS NULL OR runner_until < now())
	RETURNING 1`

// LeaseReplayRun takes or renews owner's lease of a running run for ttl. It returns
// the run's state when it is not running, and ErrRunLeased when another runner's lease
// holds it.
func LeaseReplayRun(ctx context.Context, db database.DB, run, owner string, ttl time.Duration) (string, error) {
	var one int
	err := db.QueryRow(ctx, sqlLeaseReplayRun, run, owner, ttl.Milliseconds()).Scan(&one)
	if err == nil {
		return RunRunning, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("leasing replay run %s: %w", run, err)
	}
	r, err := GetReplayRun(ctx, db, run, false)
	if err != nil {
		return "", err
	}
	if r.State == RunRunning {
		return r.State, fmt.Errorf("%w: %s", ErrRunLeased, run)
	}
	return r.State, nil
}

// sqlReplayRunnable tells whether a run has a pending item not behind a dead one: an
// item that runs now or after its backoff.
const sqlReplayRunnable = `SELECT EXISTS (SELECT 1 FROM replay_item AS i
	WHERE i.run_id = $1::UUID AND i.state = 'pending'
	  AND NOT EXISTS (SELECT 1 FROM replay_item AS p
		WHERE p.run_id = i.run_id AND p.aggregate_id = i.aggregate_id AND p.position < i.position
		  AND p.state = 'dead'))`

// ReplayRunnable reports whether run has an item left to run (sqlReplayRunnable).
func ReplayRunnable(ctx context.Context, db database.DB, run string) (bool, error) {
	var ok bool
	if err := db.QueryRow(ctx, sqlReplayRunnable, run).Scan(&ok); err != nil {
		return false, fmt.Errorf("reading replay run %s's progress: %w", run, err)
	}
	return ok, nil
}

const sqlReleaseReplayLease = `UPDATE replay_run SET runner = NULL, runner_until = NULL WHERE id = $1::UUID AND runner = $2::TEXT`

// ReleaseReplayLease gives up owner's lease of run, when its runner leaves it.
func ReleaseReplayLease(ctx context.Context, db database.DB, run, owner string) error {
	if _, err := db.Exec(ctx, sqlReleaseReplayLease, run, owner); err != nil {
		return fmt.Errorf("releasing replay run %s's lease: %w", run, err)
	}
	return nil
}
