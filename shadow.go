package inboxd

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/process"
	"github.com/inboxd/inboxd/internal/replay"
	"github.com/inboxd/inboxd/internal/stompx"
)

// ShadowOptions select the events of a shadow replay (Client.ShadowReplay) and bound
// its effect on live traffic. Zero fields do not filter.
type ShadowOptions struct {
	// EventType selects one event type.
	EventType string
	// Statuses selects by journal status: PROCESSED, REJECTED, FAILED, DEAD. Empty means
	// PROCESSED and REJECTED.
	Statuses []string
	// Since and Until select by the time received: Since ≤ received < Until.
	Since, Until time.Time
	// AggregateID selects one aggregate's events.
	AggregateID string
	// IDs selects events by journal id (Event.ID).
	IDs []string
	// Limit bounds the events run, oldest first; 0: all selected.
	Limit int
	// Ignore are noise rules: parts of emitted messages left out of the comparison,
	// "body.$.createdAt" (a JSON field; [n], [*] and ["name"] steps too) or
	// "headers.x-time" (a header).
	Ignore []string
	// Rate bounds the events run per second; 0: no bound.
	Rate float64
	// Timeout bounds each handler run; an event that overruns it is reported as timed
	// out. Zero: Config.HandlerTimeout.
	Timeout time.Duration
	// LockTimeout bounds each wait for a row lock a live transaction holds; the event
	// is then reported as timed out. Zero: one second.
	LockTimeout time.Duration
	// Baseline is an earlier report (ReadShadowReport) whose rows written per table
	// this run compares with its own; nil: table writes are not compared.
	Baseline *ShadowReport
	// Progress, when set, is called after each event.
	Progress func(ShadowProgress)
}

// ShadowProgress is how far a shadow replay has come.
type ShadowProgress struct {
	Done      int // events run
	Differing int // of which differ
	Elapsed   time.Duration
}

// ShadowReport is a shadow replay's result: the summary, then each event that differs
// from what was recorded when it was processed. Write renders it.
type ShadowReport struct {
	Run      string // the run's id, Event.ReplayRun for its handlers
	Database string // postgresql or cockroachdb
	Started  time.Time
	Finished time.Time
	Ignore   []string // the noise rules
	Summary  ShadowSummary
	// Events are the differing (or timed out) events, in journal order.
	Events []ShadowEvent
	// TableWrites are the rows each event's run wrote per table (PostgreSQL only), by
	// event id then table: what a later run with this report as its Baseline compares.
	TableWrites map[string]map[string]ShadowWrites
}

// ShadowSummary counts a shadow replay's events; an event may count under several
// kinds of difference.
type ShadowSummary struct {
	Events             int     // events run
	Same               int     // nothing differs
	Differing          int     // something differs, or the run timed out
	OutcomeChanged     int     // processed, rejected or failed, unlike what was recorded
	ErrorChanged       int     // another error text
	MessagesAdded      int     // emitted more messages
	MessagesRemoved    int     // emitted fewer
	MessagesChanged    int     // another destination, headers or body
	MessagesUnknown    int     // no recorded message to compare with (see ShadowEvent.MessagesUnknown)
	TableWritesChanged int     // other rows written per table than the baseline's
	TimedOut           int     // over Timeout or LockTimeout
	Rate               float64 // events per second
}

// ShadowEvent is one differing event of a shadow replay.
type ShadowEvent struct {
	ID          string
	Type        string
	AggregateID string
	SequenceNo  int64
	// Categories name what differs: "outcome changed", "error changed", "messages
	// added", "messages removed", "messages changed", "table writes changed", "timed out".
	Categories []string
	Recorded   ShadowOutcome // what processing recorded
	Shadow     ShadowOutcome // what this run did
	TimedOut   bool
	// MessagesUnknown tells that the outbox holds no message the event emitted, so none
	// was compared: it emitted none, or its messages were deleted by retention, emitted
	// by a release before the outbox recorded events, or by a BatchHandler's batch call.
	MessagesUnknown bool
	Messages        []ShadowMessageDiff
	TableWrites     map[string]ShadowWrites // this run's, when they differ
	BaselineWrites  map[string]ShadowWrites // the baseline's, when they differ
}

// ShadowOutcome is an outcome (processed, rejected, failed, timed out) and its error.
type ShadowOutcome struct {
	Outcome string
	Error   string
}

// ShadowMessage is an emitted message.
type ShadowMessage struct {
	ID          string
	Destination string
	Headers     map[string]string
	Body        string
}

// ShadowMessageDiff is a message that differs, by its place in emit order: added
// (Shadow only), removed (Recorded only) or changed (both).
type ShadowMessageDiff struct {
	Change   string
	Index    int
	Recorded *ShadowMessage
	Shadow   *ShadowMessage
}

// ShadowWrites are the rows a run inserted, updated and deleted in one table.
type ShadowWrites struct {
	Inserted, Updated, Deleted int64
}

// ShadowReplay runs the client's handlers again over the selected journal history,
// each event in its own transaction that is always rolled back, and reports per event
// what differs from what was recorded: outcome, error text, the messages it emitted
// and, on PostgreSQL, the rows it wrote per table (against opts.Baseline). Nothing is
// committed and nothing is published; handlers see Event.Mode == ModeShadow, and must
// skip calls outside the database then. It may run beside Run, bounded by opts, but
// the safest target is a restored copy of the database.
func (c *Client) ShadowReplay(ctx context.Context, opts ShadowOptions) (*ShadowReport, error) {
	o, err := opts.internal()
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	dialect, err := database.Detect(ctx, c.pool)
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	// Processing's settings (retry policy, timeouts); the broker's are not used.
	parts, err := c.cfg.components(stompx.Config{})
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	o.Engine = parts.process
	o.Engine.TracerProvider = c.tp
	if o.Timeout == 0 {
		o.Timeout = c.cfg.HandlerTimeout
	}
	rep, err := replay.Runner{Pool: c.pool, Dialect: dialect, Registry: c.reg, Log: c.log.With("component", "shadow"), Metrics: c.m}.Run(ctx, o)
	if err != nil {
		return nil, fmt.Errorf("inboxd: shadow replay: %w", err)
	}
	return shadowReportOf(rep), nil
}

func (opts ShadowOptions) internal() (replay.Options, error) {
	rules, err := replay.ParsePaths(opts.Ignore)
	if err != nil {
		return replay.Options{}, err
	}
	sel := journal.Selection{EventType: opts.EventType, Since: opts.Since, Until: opts.Until,
		AggregateID: opts.AggregateID, IDs: opts.IDs}
	for _, s := range opts.Statuses {
		st := journal.Status(strings.ToUpper(s))
		switch st {
		case journal.StatusProcessed, journal.StatusRejected, journal.StatusFailed, journal.StatusDead:
			sel.Statuses = append(sel.Statuses, st)
		default:
			return replay.Options{}, fmt.Errorf("status %q: shadow replay takes PROCESSED, REJECTED, FAILED or DEAD", s)
		}
	}
	o := replay.Options{Selection: sel, Limit: opts.Limit, Ignore: rules, Rate: opts.Rate, Timeout: opts.Timeout,
		LockTimeout: opts.LockTimeout, Engine: process.Config{}}
	if opts.Baseline != nil {
		o.Baseline = opts.Baseline.internal()
	}
	if opts.Progress != nil {
		o.Progress = func(p replay.Progress) { opts.Progress(ShadowProgress(p)) }
	}
	return o, nil
}

// The formats of ShadowReport.Write.
const (
	ShadowJSON     = replay.FormatJSON
	ShadowMarkdown = replay.FormatMarkdown
	ShadowHTML     = replay.FormatHTML
)

// Write renders r as ShadowJSON (for CI and as a later run's Baseline), ShadowMarkdown
// or ShadowHTML (for a person).
func (r *ShadowReport) Write(w io.Writer, format string) error { return r.internal().Write(w, format) }

// ReadShadowReport reads a report Write wrote as JSON.
func ReadShadowReport(rd io.Reader) (*ShadowReport, error) {
	rep, err := replay.ReadReport(rd)
	if err != nil {
		return nil, fmt.Errorf("inboxd: %w", err)
	}
	return shadowReportOf(rep), nil
}

func shadowReportOf(r *replay.Report) *ShadowReport {
	out := &ShadowReport{Run: r.Run, Database: r.Database, Started: r.Started, Finished: r.Finished,
		Ignore: r.Ignore, Summary: ShadowSummary(r.Summary), TableWrites: map[string]map[string]ShadowWrites{}}
	for id, ws := range r.TableWrites {
		out.TableWrites[id] = writesOf(ws)
	}
	for _, ev := range r.Events {
		se := ShadowEvent{ID: ev.ID, Type: ev.Type, AggregateID: ev.AggregateID, SequenceNo: ev.SequenceNo,
			Recorded: ShadowOutcome(ev.Recorded), Shadow: ShadowOutcome(ev.Shadow), TimedOut: ev.TimedOut,
			MessagesUnknown: ev.MessagesUnknown, TableWrites: writesOf(ev.TableWrites), BaselineWrites: writesOf(ev.BaselineWrites)}
		for _, c := range ev.Categories {
			se.Categories = append(se.Categories, string(c))
		}
		for _, m := range ev.Messages {
			d := ShadowMessageDiff{Change: string(m.Change), Index: m.Index}
			if m.Recorded != nil {
				x := ShadowMessage(*m.Recorded)
				d.Recorded = &x
			}
			if m.Shadow != nil {
				x := ShadowMessage(*m.Shadow)
				d.Shadow = &x
			}
			se.Messages = append(se.Messages, d)
		}
		out.Events = append(out.Events, se)
	}
	return out
}

func (r *ShadowReport) internal() *replay.Report {
	out := &replay.Report{Run: r.Run, Database: r.Database, Started: r.Started, Finished: r.Finished,
		Ignore: r.Ignore, Summary: replay.Summary(r.Summary), TableWrites: map[string]map[string]replay.Writes{}}
	for id, ws := range r.TableWrites {
		out.TableWrites[id] = writesIn(ws)
	}
	for _, se := range r.Events {
		ev := replay.EventResult{ID: se.ID, Type: se.Type, AggregateID: se.AggregateID, SequenceNo: se.SequenceNo,
			Recorded: replay.Outcome(se.Recorded), Shadow: replay.Outcome(se.Shadow), TimedOut: se.TimedOut,
			MessagesUnknown: se.MessagesUnknown, TableWrites: writesIn(se.TableWrites), BaselineWrites: writesIn(se.BaselineWrites)}
		for _, c := range se.Categories {
			ev.Categories = append(ev.Categories, replay.Category(c))
		}
		for _, d := range se.Messages {
			m := replay.MessageDiff{Change: replay.Category(d.Change), Index: d.Index}
			if d.Recorded != nil {
				x := replay.Message(*d.Recorded)
				m.Recorded = &x
			}
			if d.Shadow != nil {
				x := replay.Message(*d.Shadow)
				m.Shadow = &x
			}
			ev.Messages = append(ev.Messages, m)
		}
		out.Events = append(out.Events, ev)
	}
	return out
}

func writesOf(ws map[string]replay.Writes) map[string]ShadowWrites {
	if ws == nil {
		return nil
	}
	out := make(map[string]ShadowWrites, len(ws))
	for t, w := range ws {
		out[t] = ShadowWrites(w)
	}
	return out
}

func writesIn(ws map[string]ShadowWrites) map[string]replay.Writes {
	if ws == nil {
		return nil
	}
	out := make(map[string]replay.Writes, len(ws))
	for t, w := range ws {
		out[t] = replay.Writes(w)
	}
	return out
}
