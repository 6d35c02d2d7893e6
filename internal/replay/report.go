package replay

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/outbox"
)

// Report is a shadow run's result: the summary, then each differing event.
type Report struct {
	Run      string    `json:"run"`
	Database string    `json:"database"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Ignore   []string  `json:"ignore,omitempty"`
	Summary  Summary   `json:"summary"`
	// Events are the events that differ (or timed out), in journal order.
	Events []EventResult `json:"events"`
	// TableWrites are the rows each event's run wrote per table (PostgreSQL), for every
	// event run: the baseline of a later run (Options.Baseline).
	TableWrites map[string]map[string]Writes `json:"tableWrites,omitempty"`
}

// Summary counts the events by what differed; an event can count under several.
type Summary struct {
	Events             int     `json:"events"`
	Same               int     `json:"same"`
	Differing          int     `json:"differing"`
	OutcomeChanged     int     `json:"outcomeChanged"`
	ErrorChanged       int     `json:"errorChanged"`
	MessagesAdded      int     `json:"messagesAdded"`
	MessagesRemoved    int     `json:"messagesRemoved"`
	MessagesChanged    int     `json:"messagesChanged"`
	MessagesUnknown    int     `json:"messagesUnknown"`
	TableWritesChanged int     `json:"tableWritesChanged"`
	TimedOut           int     `json:"timedOut"`
	Rate               float64 `json:"eventsPerSecond"`
}

// Category names a kind of difference.
type Category string

// The categories of a difference.
const (
	CategoryOutcome     Category = "outcome changed"
	CategoryError       Category = "error changed"
	CategoryAdded       Category = "messages added"
	CategoryRemoved     Category = "messages removed"
	CategoryChanged     Category = "messages changed"
	CategoryTableWrites Category = "table writes changed"
	CategoryTimedOut    Category = "timed out"
)

// Outcome is an outcome and its error text.
type Outcome struct {
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// Message is an emitted message; Body is its text.
type Message struct {
	ID          string            `json:"id"`
	Destination string            `json:"destination"`
	Headers     map[string]string `json:"headers,omitempty"`
	Body        string            `json:"body"`
}

// MessageDiff is one message that differs: added (Shadow only), removed (Recorded
// only) or changed (both, at the same place in emit order).
type MessageDiff struct {
	Change   Category `json:"change"`
	Index    int      `json:"index"`
	Recorded *Message `json:"recorded,omitempty"`
	Shadow   *Message `json:"shadow,omitempty"`
}

// Writes are the rows a run inserted, updated and deleted in one table.
type Writes struct {
	Inserted int64 `json:"inserted"`
	Updated  int64 `json:"updated"`
	Deleted  int64 `json:"deleted"`
}

// EventResult is one event's comparison.
type EventResult struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	AggregateID string     `json:"aggregateId"`
	SequenceNo  int64      `json:"sequenceNo"`
	Categories  []Category `json:"categories"`
	Recorded    Outcome    `json:"recorded"`
	Shadow      Outcome    `json:"shadow"`
	TimedOut    bool       `json:"timedOut,omitempty"`
	// MessagesUnknown: the outbox holds no message this event emitted (retention, an
	// older release, a set-based call, or none emitted), so messages were not compared.
	MessagesUnknown bool              `json:"messagesUnknown,omitempty"`
	Messages        []MessageDiff     `json:"messages,omitempty"`
	TableWrites     map[string]Writes `json:"tableWrites,omitempty"`
	BaselineWrites  map[string]Writes `json:"baselineWrites,omitempty"`
	shadowMsgs      []Message
	conflict        bool // the transaction conflicted (isConflict): run it again
}

// compare fills res's differences: outcome, error, messages against recorded (none
// recorded: unknown), table writes against the baseline's when known.
func compare(res *EventResult, recorded []outbox.Message, writes, base map[string]Writes, baseKnown bool, rules []Path) {
	if res.TimedOut {
		res.Categories = append(res.Categories, CategoryTimedOut)
		return
	}
	if res.Shadow.Outcome != res.Recorded.Outcome {
		res.Categories = append(res.Categories, CategoryOutcome)
	}
	if res.Shadow.Error != res.Recorded.Error {
		res.Categories = append(res.Categories, CategoryError)
	}
	if len(recorded) == 0 {
		res.MessagesUnknown = true
	} else {
		seen := map[Category]bool{}
		for i := 0; i < max(len(recorded), len(res.shadowMsgs)); i++ {
			var d MessageDiff
			switch {
			case i >= len(recorded):
				m := res.shadowMsgs[i]
				d = MessageDiff{Change: CategoryAdded, Index: i, Shadow: &m}
			case i >= len(res.shadowMsgs):
				m := fromOutbox(recorded[i])
				d = MessageDiff{Change: CategoryRemoved, Index: i, Recorded: &m}
			default:
				rm, sm := fromOutbox(recorded[i]), res.shadowMsgs[i]
				if sameMessage(rm, sm, rules) {
					continue
				}
				d = MessageDiff{Change: CategoryChanged, Index: i, Recorded: &rm, Shadow: &sm}
			}
			res.Messages = append(res.Messages, d)
			if !seen[d.Change] {
				seen[d.Change] = true
				res.Categories = append(res.Categories, d.Change)
			}
		}
	}
	if baseKnown && !maps.Equal(writes, base) && !(len(writes) == 0 && len(base) == 0) {
		res.Categories = append(res.Categories, CategoryTableWrites)
		res.TableWrites, res.BaselineWrites = writes, base
	}
}

func sameMessage(a, b Message, rules []Path) bool {
	return a.Destination == b.Destination &&
		maps.Equal(normalHeaders(a.Headers, rules), normalHeaders(b.Headers, rules)) &&
		normalBody([]byte(a.Body), rules) == normalBody([]byte(b.Body), rules)
}

// result is res's label of the ShadowEvents metric.
func (res EventResult) result() string {
	switch {
	case res.TimedOut:
		return "timed_out"
	case len(res.Categories) > 0:
		return "differing"
	default:
		return "same"
	}
}

// add counts res and keeps it if it differs.
func (r *Report) add(res EventResult) {
	s := &r.Summary
	s.Events++
	if res.MessagesUnknown {
		s.MessagesUnknown++
	}
	if len(res.Categories) == 0 {
		s.Same++
		return
	}
	s.Differing++
	for _, c := range res.Categories {
		switch c {
		case CategoryOutcome:
			s.OutcomeChanged++
		case CategoryError:
			s.ErrorChanged++
		case CategoryAdded:
			s.MessagesAdded++
		case CategoryRemoved:
			s.MessagesRemoved++
		case CategoryChanged:
			s.MessagesChanged++
		case CategoryTableWrites:
			s.TableWritesChanged++
		case CategoryTimedOut:
			s.TimedOut++
		}
	}
	r.Events = append(r.Events, res)
}

// Formats of Write.
const (
	FormatJSON     = "json"
	FormatMarkdown = "markdown"
	FormatHTML     = "html"
)

// Write renders r as JSON (for CI), Markdown or HTML (for a person).
func (r *Report) Write(w io.Writer, format string) error {
	switch format {
	case FormatJSON, "":
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(r)
	case FormatMarkdown:
		return r.writeMarkdown(w)
	case FormatHTML:
		return htmlReport.Execute(w, r)
	default:
		return fmt.Errorf("unknown report format %q (json, markdown, html)", format)
	}
}

// ReadReport reads a JSON report, e.g. a baseline.
func ReadReport(rd io.Reader) (*Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("reading a shadow report: %w", err)
	}
	return &r, nil
}

// SummaryRows are the summary's lines, in the order every format shows them.
func (r *Report) SummaryRows() [][2]string {
	s := r.Summary
	row := func(k string, v int) [2]string { return [2]string{k, fmt.Sprint(v)} }
	return [][2]string{row("events", s.Events), row("same", s.Same), row("differing", s.Differing),
		row(string(CategoryOutcome), s.OutcomeChanged), row(string(CategoryError), s.ErrorChanged),
		row(string(CategoryAdded), s.MessagesAdded), row(string(CategoryRemoved), s.MessagesRemoved),
		row(string(CategoryChanged), s.MessagesChanged), row(string(CategoryTableWrites), s.TableWritesChanged),
		row(string(CategoryTimedOut), s.TimedOut), row("messages unknown (not compared)", s.MessagesUnknown)}
}

func (r *Report) writeMarkdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Shadow replay %s\n\n%s, %s to %s, %.1f events/s", r.Run, r.Database,
		r.Started.Format(time.RFC3339), r.Finished.Format(time.RFC3339), r.Summary.Rate)
	if len(r.Ignore) > 0 {
		fmt.Fprintf(&b, ", ignoring %s", strings.Join(r.Ignore, ", "))
	}
	b.WriteString("\n\n| | events |\n|---|---:|\n")
	for _, row := range r.SummaryRows() {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}
	for _, ev := range r.Events {
		fmt.Fprintf(&b, "\n## %s `%s`\n\n%s, aggregate `%s`, sequence %d: **%s**\n\n", md(ev.Type), ev.ID, md(ev.Type),
			md(ev.AggregateID), ev.SequenceNo, strings.Join(catStrings(ev.Categories), ", "))
		fmt.Fprintf(&b, "- recorded: %s %s\n- shadow: %s %s\n", ev.Recorded.Outcome, quoteErr(ev.Recorded.Error),
			ev.Shadow.Outcome, quoteErr(ev.Shadow.Error))
		for _, m := range ev.Messages {
			fmt.Fprintf(&b, "- message %d %s: recorded %s, shadow %s\n", m.Index, m.Change, msgText(m.Recorded), msgText(m.Shadow))
		}
		for _, t := range slices.Sorted(maps.Keys(mergeKeys(ev.TableWrites, ev.BaselineWrites))) {
			fmt.Fprintf(&b, "- table `%s`: baseline %s, shadow %s\n", t, ev.BaselineWrites[t], ev.TableWrites[t])
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (w Writes) String() string {
	return fmt.Sprintf("+%d ~%d -%d", w.Inserted, w.Updated, w.Deleted)
}

func mergeKeys(a, b map[string]Writes) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func catStrings(cs []Category) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c)
	}
	return out
}

// md makes untrusted text safe in Markdown: no table, code or HTML breakout.
func md(s string) string {
	return strings.NewReplacer("|", `\|`, "`", "'", "<", "&lt;", ">", "&gt;", "\n", " ", "\r", " ").Replace(s)
}

func quoteErr(s string) string {
	if s == "" {
		return ""
	}
	return "(" + md(s) + ")"
}

func msgText(m *Message) string {
	if m == nil {
		return "none"
	}
	return fmt.Sprintf("`%s` %s", md(m.Destination), md(truncate(m.Body, 200)))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

var htmlReport = template.Must(template.New("report").Funcs(template.FuncMap{
	"trunc":  func(s string) string { return truncate(s, 2000) },
	"tables": func(a, b map[string]Writes) []string { return slices.Sorted(maps.Keys(mergeKeys(a, b))) },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Shadow replay {{.Run}}</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}pre{white-space:pre-wrap;background:#f6f6f6;padding:.4em}</style>
</head><body>
<h1>Shadow replay {{.Run}}</h1>
<p>{{.Database}}, {{.Started.Format "2006-01-02T15:04:05Z07:00"}} to {{.Finished.Format "2006-01-02T15:04:05Z07:00"}}, {{printf "%.1f" .Summary.Rate}} events/s{{if .Ignore}}, ignoring {{range $i, $p := .Ignore}}{{if $i}}, {{end}}<code>{{$p}}</code>{{end}}{{end}}</p>
<table>{{range .SummaryRows}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
{{range .Events}}<h2>{{.Type}} <code>{{.ID}}</code></h2>
<p>aggregate <code>{{.AggregateID}}</code>, sequence {{.SequenceNo}}: <strong>{{range $i, $c := .Categories}}{{if $i}}, {{end}}{{$c}}{{end}}</strong></p>
<ul><li>recorded: {{.Recorded.Outcome}} {{if .Recorded.Error}}<pre>{{trunc .Recorded.Error}}</pre>{{end}}</li>
<li>shadow: {{.Shadow.Outcome}} {{if .Shadow.Error}}<pre>{{trunc .Shadow.Error}}</pre>{{end}}</li>
{{range .Messages}}<li>message {{.Index}} {{.Change}}:
 recorded {{with .Recorded}}<code>{{.Destination}}</code><pre>{{trunc .Body}}</pre>{{else}}none{{end}}
 shadow {{with .Shadow}}<code>{{.Destination}}</code><pre>{{trunc .Body}}</pre>{{else}}none{{end}}</li>{{end}}
{{$ev := .}}{{range tables .TableWrites .BaselineWrites}}<li>table <code>{{.}}</code>: baseline {{index $ev.BaselineWrites .}}, shadow {{index $ev.TableWrites .}}</li>{{end}}
</ul>{{end}}
</body></html>
`))

func fromOutbox(m outbox.Message) Message {
	return Message{ID: m.ID, Destination: m.Destination, Headers: m.Headers, Body: string(m.Body)}
}
