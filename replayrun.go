package inboxd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/replay"
	"github.com/inboxd/inboxd/internal/stompx"
)

// ReplaySelection chooses the settled events a replay reprocesses. Zero fields do not
// filter, except Statuses, whose zero value means PROCESSED and REJECTED.
type ReplaySelection struct {
	EventType   string
	Statuses    []string // PROCESSED, REJECTED
	Since       time.Time
	Until       time.Time
	AggregateID string
	IDs         []string
	// NoTail turns the tail rule off: by default every later settled event of a selected
	// event's aggregate is replayed after it, in journal order.
	NoTail bool
}

// ReplayRun is a stored replay: its frozen plan's counts, options, state and progress.
type ReplayRun struct {
	ID         string
	State      string // planned, running, paused, cancelled, done
	Reason     string
	StartedBy  string
	CreatedAt  time.Time
	StartedAt  *time.Time
	FinishedAt *time.Time
	Selection  string // the selection, as JSON
	// The plan: events, those selected, those the tail rule added, aggregates, per type.
	Events, Selected, AddedByTail, Aggregates int64
	Types                                     map[string]int64
	Publish                                   bool
	Rate                                      float64
	// Progress: items pending, done, dead (failed past the retry policy), attempts made.
	Pending, Done, Dead, Attempts int64
}

// PlanReplay plans a replay of sel and stores the plan, frozen, as a run in state
// planned; nothing runs until StartReplay.
func (c *Client) PlanReplay(ctx context.Context, sel ReplaySelection) (*ReplayRun, error) {
	js := journal.Selection{EventType: sel.EventType, Since: sel.Since, Until: sel.Until, AggregateID: sel.AggregateID, IDs: sel.IDs}
	for _, s := range sel.Statuses {
		st := journal.Status(strings.ToUpper(s))
		if st != journal.StatusProcessed && st != journal.StatusRejected {
			return nil, fmt.Errorf("inboxd: status %q: a replay takes PROCESSED or REJECTED (FAILED and DEAD have retry)", s)
		}
		js.Statuses = append(js.Statuses, st)
	}
	run, _, err := replay.StorePlan(ctx, c.pool, js, sel.NoTail, 0)
	if err != nil {
		return nil, fmt.Errorf("inboxd: planning a replay: %w", err)
	}
	return c.ReplayStatus(ctx, run.ID)
}

// ReplayStart is how StartReplay starts a planned run.
type ReplayStart struct {
	// Reason says why the run is started; it is recorded with the run, for the audit.
	Reason string
	// StartedBy names who started the run (an operator, a role); recorded with it.
	StartedBy string
	// Rate bounds the events replayed per second. Defaults to 0: no bound.
	Rate float64
	// Publish makes the messages the run's handlers emit published, each with an
	// outbox id of its own, so that a downstream inbox does not drop it as a duplicate
	// of the first run's. Defaults to false: they are suppressed.
	Publish bool
}

// StartReplay starts a planned run as start says. Live events of the run's aggregates
// wait until the aggregate's replay is done. A running Client executes the run, or
// ExecuteReplay does.
func (c *Client) StartReplay(ctx context.Context, runID string, start ReplayStart) error {
	if err := journal.StartReplayRun(ctx, c.pool, runID, start.Reason, start.StartedBy, start.Rate, start.Publish); err != nil {
		return fmt.Errorf("inboxd: starting replay: %w", err)
	}
	return nil
}

// PauseReplay pauses a running run before its next event; its aggregates stay held.
func (c *Client) PauseReplay(ctx context.Context, runID string) error {
	if err := journal.PauseReplayRun(ctx, c.pool, runID); err != nil {
		return fmt.Errorf("inboxd: pausing replay: %w", err)
	}
	return nil
}

// ResumeReplay resumes a paused run.
func (c *Client) ResumeReplay(ctx context.Context, runID string) error {
	if err := journal.ResumeReplayRun(ctx, c.pool, runID); err != nil {
		return fmt.Errorf("inboxd: resuming replay: %w", err)
	}
	return nil
}

// CancelReplay cancels a run before its next event and releases its aggregates.
func (c *Client) CancelReplay(ctx context.Context, runID string) error {
	if err := journal.CancelReplayRun(ctx, c.pool, runID); err != nil {
		return fmt.Errorf("inboxd: cancelling replay: %w", err)
	}
	return nil
}

// ReplayStatus reads a run with its progress.
func (c *Client) ReplayStatus(ctx context.Context, runID string) (*ReplayRun, error) {
	r, err := journal.GetReplayRun(ctx, c.pool, runID, true)
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	return &ReplayRun{ID: r.ID, State: r.State, Reason: r.Reason, StartedBy: r.StartedBy, CreatedAt: r.CreatedAt,
		StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Selection: string(r.Selection), Events: r.Events,
		Selected: r.Selected, AddedByTail: r.AddedByTail, Aggregates: r.Aggregates, Types: r.Types, Publish: r.Publish,
		Rate: r.Rate, Pending: r.Pending, Done: r.Done, Dead: r.Dead, Attempts: r.Attempted}, nil
}

// ExecuteReplay runs a started run with the client's handlers until it is done, paused
// or cancelled, and returns its state; after a crash, calling it again resumes the run,
// and no event is replayed twice in one run. Run one ExecuteReplay per run.
func (c *Client) ExecuteReplay(ctx context.Context, runID string) (string, error) {
	dialect, err := database.Detect(ctx, c.pool)
	if err != nil {
		return "", fmt.Errorf("inboxd: %w", err)
	}
	parts, err := c.cfg.components(stompx.Config{})
	if err != nil {
		return "", fmt.Errorf("inboxd: %w", err)
	}
	cfg := parts.process
	cfg.TracerProvider = c.tp
	state, err := replay.Executor{Pool: c.pool, Dialect: dialect, Registry: c.reg, Log: c.log.With("component", "replay"),
		Metrics: c.m, Engine: cfg}.Execute(ctx, runID)
	if err != nil {
		return state, fmt.Errorf("inboxd: replay: %w", err)
	}
	return state, nil
}
