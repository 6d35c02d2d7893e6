package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is everything one "inboxd bench" run measured; results.json holds it.
type Report struct {
	Started      time.Time      `json:"started"`
	Finished     time.Time      `json:"finished"`
	Seconds      float64        `json:"seconds"`
	Host         Host           `json:"host"`
	Settings     map[string]any `json:"settings"`
	Summaries    []Summary      `json:"summaries"`
	Measurements []Measurement  `json:"measurements"`
}

// Host describes the machine; the load averages say how noisy the numbers are.
type Host struct {
	Name       string  `json:"name"`
	CPUs       int     `json:"cpus"`
	OS         string  `json:"os"`
	GoVersion  string  `json:"go_version"`
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`
	// CalibrationBefore/After are the seconds one core took to SHA-256 300 MiB at the
	// start and the end of the run (calibrate): a slow phase of the machine shows there.
	CalibrationBefore float64 `json:"calibration_before_s"`
	CalibrationAfter  float64 `json:"calibration_after_s"`
}

// Measurement is one row, one configuration, one repetition.
type Measurement struct {
	Row    string `json:"row"`
	Config string `json:"config"`
	Knobs  Knobs  `json:"knobs"`
	N      int    `json:"n"` // messages measured
	Rep    int    `json:"rep"`
	// DrainSeconds is subscription → last message done, as the child timed it (for the
	// end-to-end rows: first measured send → last processed_at). MsgPerSec is N over it.
	DrainSeconds float64 `json:"drain_seconds"`
	// WallSeconds is process start → result, as the parent timed it (exec, connecting
	// and, for the end-to-end rows, the warm-up included).
	WallSeconds   float64 `json:"wall_seconds"`
	MsgPerSec     float64 `json:"msg_per_sec"`
	CPUSeconds    float64 `json:"cpu_seconds"`         // child's user+system (rusage)
	CPUPer10k     float64 `json:"cpu_seconds_per_10k"` // of the child
	HostCPUPer10k float64 `json:"host_cpu_seconds_per_10k"`
	// Of the broker (java) and the database (postgres) processes, from /proc.
	BrokerCPUPer10k float64 `json:"broker_cpu_seconds_per_10k"`
	DBCPUPer10k     float64 `json:"db_cpu_seconds_per_10k"`
	// For the drain rows, what publishing the N messages before the row cost the host
	// and the broker, outside the row's own figures (a rate row's figures include it).
	PublishHostCPUPer10k   float64 `json:"publish_host_cpu_seconds_per_10k,omitempty"`
	PublishBrokerCPUPer10k float64 `json:"publish_broker_cpu_seconds_per_10k,omitempty"`
	// PeakRSSBytes is the child's VmHWM; RusageMaxRSSBytes its ru_maxrss, which on
	// Linux also counts the parent's high-water mark at exec (see selfPeakRSS).
	PeakRSSBytes      int64    `json:"peak_rss_bytes"`
	RusageMaxRSSBytes int64    `json:"rusage_maxrss_bytes"`
	OfferedRate       float64  `json:"offered_rate,omitempty"`
	Latency           *Latency `json:"latency,omitempty"`        // processed_at − sentAt
	IngestLatency     *Latency `json:"ingest_latency,omitempty"` // received_at − sentAt
	Check             string   `json:"check"`
	OK                bool     `json:"ok"`
	Profile           string   `json:"cpu_profile,omitempty"`
	Note              string   `json:"note,omitempty"`
	// Slowdown is the drain time over that of the row's baseline in the same repetition:
	// backlog, the first level's (0 blocked); journal-size, the same row on an empty journal.
	Slowdown   float64 `json:"slowdown,omitempty"`
	SlowdownVs string  `json:"slowdown_vs,omitempty"` // the baseline, in words
	// ClaimLatency is journal.ClaimHeads' duration on the backlog row's setup, in ms.
	ClaimLatency *Latency `json:"claim_latency_ms,omitempty"`
	// VsBase is a figure of the row over the same figure of its base row in the same
	// repetition: shadow, its events/s over e2e-max's; replay-live, its p99 over that of
	// e2e-sweeper at the same rate. VsBaseWhat says which, in words.
	VsBase     float64 `json:"vs_base,omitempty"`
	VsBaseWhat string  `json:"vs_base_what,omitempty"`
	// ReplayRate is, for replay-live, the events per second the replay achieved while
	// the live rate was measured, under its limit ReplayLimit.
	ReplayRate  float64 `json:"replay_rate,omitempty"`
	ReplayLimit float64 `json:"replay_limit,omitempty"`
	// Load is the 1-minute load average when the row started, Calibration a sample of
	// the header's figure taken then (seconds to SHA-256 300 MiB, scaled from 30 MiB).
	Load        float64 `json:"load"`
	Calibration float64 `json:"calibration_s"`
}

// Summary is the medians of one row and configuration over the repetitions.
type Summary struct {
	Row             string  `json:"row"`
	Config          string  `json:"config"`
	N               int     `json:"n"`
	Reps            int     `json:"reps"`
	MsgPerSec       float64 `json:"msg_per_sec"`
	CPUPer10k       float64 `json:"cpu_seconds_per_10k"`
	HostCPUPer10k   float64 `json:"host_cpu_seconds_per_10k"`
	BrokerCPUPer10k float64 `json:"broker_cpu_seconds_per_10k"`
	DBCPUPer10k     float64 `json:"db_cpu_seconds_per_10k"`
	// For the drain rows, what publishing the N messages before the row cost the host
	// and the broker, outside the row's own figures (a rate row's figures include it).
	PublishHostCPUPer10k   float64 `json:"publish_host_cpu_seconds_per_10k,omitempty"`
	PublishBrokerCPUPer10k float64 `json:"publish_broker_cpu_seconds_per_10k,omitempty"`
	PeakRSSBytes           int64   `json:"peak_rss_bytes"` // the largest over the repetitions
	VsBroker               float64 `json:"vs_broker"`      // median of the per-repetition ratios
	VsNaive                float64 `json:"vs_naive"`
	VsIngest               float64 `json:"vs_ingest,omitempty"` // ingest+prune: against the ingest row of the same repetition
	// InboxdVsThis, for a river row, is inboxd's counterpart (ingest, e2e-max) over it, in
	// the same repetition.
	InboxdVsThis  float64  `json:"inboxd_vs_this,omitempty"`
	Latency       *Latency `json:"latency,omitempty"` // median of each percentile
	IngestLatency *Latency `json:"ingest_latency,omitempty"`
	Check         string   `json:"check"`
	OK            bool     `json:"ok"`
	Slowdown      float64  `json:"slowdown,omitempty"`         // median (see Measurement)
	ClaimLatency  *Latency `json:"claim_latency_ms,omitempty"` // median of each percentile
	VsBase        float64  `json:"vs_base,omitempty"`          // median (see Measurement)
	ReplayRate    float64  `json:"replay_rate,omitempty"`      // median (see Measurement)
	// LoadMin/Max and CalibrationMin/Max span the repetitions (see Measurement).
	LoadMin        float64 `json:"load_min"`
	LoadMax        float64 `json:"load_max"`
	CalibrationMin float64 `json:"calibration_min_s"`
	CalibrationMax float64 `json:"calibration_max_s"`
}

// summarizeAll groups measurements by row, configuration and N, in first-seen order.
// A ratio is taken between rows of the same repetition: the broker and naive rows of
// the same N, or of the smallest N for the end-to-end rows, which have their own.
func summarizeAll(ms []Measurement) []Summary {
	type key struct {
		row, config string
		n           int
	}
	var order []key
	groups := map[key][]Measurement{}
	for _, m := range ms {
		k := key{m.Row, m.Config, m.N}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], m)
	}
	baseline := func(row string, rep, n int) (Measurement, bool) {
		var best Measurement
		found := false
		for _, m := range ms {
			if m.Row != row || m.Rep != rep {
				continue
			}
			if m.N == n {
				return m, true
			}
			if !found || m.N < best.N {
				best, found = m, true
			}
		}
		return best, found
	}
	out := make([]Summary, 0, len(order))
	for _, k := range order {
		g := groups[k]
		s := Summary{Row: k.row, Config: k.config, N: k.n, Reps: len(g), OK: true, Check: "ok"}
		var rate, cpu, host, amq, pg, vsB, vsN, vsI, inboxd []float64
		var lats, ingLats, claims []Latency
		var slow, pubHost, pubAmq, vsBase, replayRate []float64
		for i, m := range g {
			if i == 0 {
				s.LoadMin, s.LoadMax, s.CalibrationMin, s.CalibrationMax = m.Load, m.Load, m.Calibration, m.Calibration
			}
			s.LoadMin, s.LoadMax = min(s.LoadMin, m.Load), max(s.LoadMax, m.Load)
			s.CalibrationMin, s.CalibrationMax = min(s.CalibrationMin, m.Calibration), max(s.CalibrationMax, m.Calibration)
			rate = append(rate, m.MsgPerSec)
			cpu = append(cpu, m.CPUPer10k)
			host = append(host, m.HostCPUPer10k)
			amq = append(amq, m.BrokerCPUPer10k)
			pg = append(pg, m.DBCPUPer10k)
			pubHost, pubAmq = append(pubHost, m.PublishHostCPUPer10k), append(pubAmq, m.PublishBrokerCPUPer10k)
			s.PeakRSSBytes = max(s.PeakRSSBytes, m.PeakRSSBytes)
			// A shadow run's rate is in events, not messages: no ratio to a drain of messages.
			if b, ok := baseline(rowBroker, m.Rep, m.N); ok && b.MsgPerSec > 0 && m.Row != rowShadow {
				vsB = append(vsB, m.MsgPerSec/b.MsgPerSec)
			}
			if b, ok := baseline(rowNaive, m.Rep, m.N); ok && b.MsgPerSec > 0 && m.Row != rowShadow {
				vsN = append(vsN, m.MsgPerSec/b.MsgPerSec)
			}
			if b, ok := baseline(rowIngest, m.Rep, m.N); ok && b.MsgPerSec > 0 && m.Row == rowIngestPrune {
				vsI = append(vsI, m.MsgPerSec/b.MsgPerSec)
			}
			if cp, ok := riverCounterpart[m.Row]; ok && m.MsgPerSec > 0 {
				if b, ok := baseline(cp, m.Rep, m.N); ok && b.N == m.N {
					inboxd = append(inboxd, b.MsgPerSec/m.MsgPerSec)
				}
			}
			if m.Latency != nil {
				lats = append(lats, *m.Latency)
			}
			if m.IngestLatency != nil {
				ingLats = append(ingLats, *m.IngestLatency)
			}
			if m.ClaimLatency != nil {
				claims = append(claims, *m.ClaimLatency)
			}
			if m.Slowdown > 0 {
				slow = append(slow, m.Slowdown)
			}
			if m.VsBase > 0 {
				vsBase = append(vsBase, m.VsBase)
			}
			if m.ReplayLimit > 0 {
				replayRate = append(replayRate, m.ReplayRate)
			}
			if !m.OK && s.OK {
				s.OK, s.Check = false, fmt.Sprintf("rep %d: %s", m.Rep, m.Check)
			}
		}
		if s.OK && len(g) > 0 {
			s.Check = g[len(g)-1].Check
			if len(g) > 1 {
				s.Check = fmt.Sprintf("ok ×%d", len(g))
			}
		}
		s.MsgPerSec, s.CPUPer10k, s.HostCPUPer10k = median(rate), median(cpu), median(host)
		s.BrokerCPUPer10k, s.DBCPUPer10k = median(amq), median(pg)
		s.PublishHostCPUPer10k, s.PublishBrokerCPUPer10k = median(pubHost), median(pubAmq)
		s.VsBroker, s.VsNaive = median(vsB), median(vsN)
		if len(vsI) > 0 {
			s.VsIngest = median(vsI)
			s.Check += fmt.Sprintf("; %.2f× ingest", s.VsIngest)
		}
		if len(inboxd) > 0 {
			s.InboxdVsThis = median(inboxd)
			s.Check += fmt.Sprintf("; %s %.2f× this", riverCounterpart[k.row], s.InboxdVsThis)
		}
		s.Latency, s.IngestLatency = medianLatency(lats), medianLatency(ingLats)
		s.ClaimLatency = medianLatency(claims)
		if len(slow) > 0 {
			s.Slowdown = median(slow)
			s.Check += fmt.Sprintf("; drain %.2f× that %s", s.Slowdown, g[0].SlowdownVs)
		}
		if s.ClaimLatency != nil {
			s.Check += fmt.Sprintf("; ClaimHeads p50/p99 %.1f/%.1f ms", s.ClaimLatency.P50, s.ClaimLatency.P99)
		}
		if len(vsBase) > 0 {
			s.VsBase = median(vsBase)
			s.Check += fmt.Sprintf("; %s %.2f× %s", vsBaseFigure(k.row), s.VsBase, g[0].VsBaseWhat)
		}
		if len(replayRate) > 0 {
			s.ReplayRate = median(replayRate)
			s.Check += fmt.Sprintf("; replay %.1f events/s (limit %.0f)", s.ReplayRate, g[0].ReplayLimit)
		}
		out = append(out, s)
	}
	return out
}

// vsBaseFigure names the figure a row's VsBase compares.
func vsBaseFigure(row string) string {
	if row == rowReplayLive {
		return "p99"
	}
	return "events/s"
}

// riverCounterpart is the inboxd row each river row is set beside.
var riverCounterpart = map[string]string{rowRiverIngest: rowIngest, rowRiver: rowE2EMax}

func medianLatency(ls []Latency) *Latency {
	if len(ls) == 0 {
		return nil
	}
	pick := func(f func(Latency) float64) float64 {
		xs := make([]float64, len(ls))
		for i, l := range ls {
			xs[i] = f(l)
		}
		return median(xs)
	}
	return &Latency{
		Count: int(pick(func(l Latency) float64 { return float64(l.Count) })),
		P50:   pick(func(l Latency) float64 { return l.P50 }),
		P95:   pick(func(l Latency) float64 { return l.P95 }),
		P99:   pick(func(l Latency) float64 { return l.P99 }),
		Max:   pick(func(l Latency) float64 { return l.Max }),
	}
}

func fmtRatio(x float64) string {
	if math.IsNaN(x) || x == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", x)
}

func fmtLatency(l *Latency) string {
	if l == nil {
		return "—"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f", l.P50, l.P95, l.P99)
}

// fmtSpan is "a" or "a–b", to two decimals.
func fmtSpan(lo, hi float64) string {
	if fmt.Sprintf("%.2f", lo) == fmt.Sprintf("%.2f", hi) {
		return fmt.Sprintf("%.2f", lo)
	}
	return fmt.Sprintf("%.2f–%.2f", lo, hi)
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// tableRows is the one table, as cells; the text and Markdown forms share it.
func tableRows(rep *Report) [][]string {
	rows := [][]string{{"row", "config", "N", "msg/s", "vs broker", "vs naive", "CPU s/10k", "amq CPU s/10k", "pg CPU s/10k", "host CPU s/10k", "peak RSS MiB", "e2e p50/p95/p99 ms", "load", "cal s", "check"}}
	for _, s := range rep.Summaries {
		rows = append(rows, []string{
			s.Row, s.Config, fmt.Sprint(s.N), fmt.Sprintf("%.0f", s.MsgPerSec), fmtRatio(s.VsBroker), fmtRatio(s.VsNaive),
			fmt.Sprintf("%.2f", s.CPUPer10k), fmt.Sprintf("%.2f", s.BrokerCPUPer10k), fmt.Sprintf("%.2f", s.DBCPUPer10k), fmt.Sprintf("%.2f", s.HostCPUPer10k), mib(s.PeakRSSBytes), fmtLatency(s.Latency),
			fmtSpan(s.LoadMin, s.LoadMax), fmtSpan(s.CalibrationMin, s.CalibrationMax), s.Check,
		})
	}
	return rows
}

func caption(rep *Report) string {
	reps, _ := rep.Settings["reps"].(int)
	return fmt.Sprintf("%d CPUs, load %.2f → %.2f, CPU calibration %.2f → %.2f s (one core, SHA-256 of %d MiB; lower is faster), %d repetition(s), medians; ratios within a repetition; "+
		"load = 1-minute load average and cal s = the calibration (from a 30 MiB sample) when each row started, over the repetitions; "+
		"peak RSS = the child's VmHWM; CPU = the row's child process (rusage), amq/pg = the broker's and the database's processes (/proc), host = the whole machine; "+
		"e2e rows: latency = processed_at − sentAt (publisher clock) at a fixed offered rate, so their msg/s and ratios show that rate, not a ceiling",
		rep.Host.CPUs, rep.Host.LoadBefore, rep.Host.LoadAfter, rep.Host.CalibrationBefore, rep.Host.CalibrationAfter, calibrationMiB, reps)
}

// writeTable prints the table for a terminal.
func writeTable(w io.Writer, rep *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range tableRows(rep) {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, caption(rep))
	return err
}

// writeMarkdown writes the table as Markdown.
func writeMarkdown(w io.Writer, rep *Report) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# inboxd bench, %s\n\n", rep.Started.Format(time.RFC3339))
	markdownTable(&b, rep)
	_, err := io.WriteString(w, b.String())
	return err
}

// markdownTable writes the results table as Markdown, then its caption.
func markdownTable(b *strings.Builder, rep *Report) {
	for i, r := range tableRows(rep) {
		for j := range r {
			r[j] = strings.ReplaceAll(r[j], "|", `\|`)
		}
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
		if i == 0 {
			b.WriteString(strings.Repeat("|---", len(r)) + "|\n")
		}
	}
	fmt.Fprintf(b, "\n%s.\n", caption(rep))
}

// writeFiles writes results.json, results.md and results.svg into dir.
func writeFiles(dir string, rep *Report) error {
	write := func(name string, f func(io.Writer) error) error {
		file, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		if err := f(file); err != nil {
			file.Close()
			return fmt.Errorf("writing %s: %w", name, err)
		}
		return file.Close()
	}
	if err := write("results.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(jsonSafe(rep))
	}); err != nil {
		return err
	}
	if err := write("results.md", func(w io.Writer) error { return writeMarkdown(w, rep) }); err != nil {
		return err
	}
	return write("results.svg", func(w io.Writer) error { return writeSVG(w, rep) })
}

// jsonSafe replaces the NaNs JSON cannot hold with zeros.
func jsonSafe(rep *Report) *Report {
	c := *rep
	fix := func(x *float64) {
		if math.IsNaN(*x) || math.IsInf(*x, 0) {
			*x = 0
		}
	}
	fixLat := func(l *Latency) *Latency {
		if l == nil {
			return nil
		}
		v := *l
		fix(&v.P50)
		fix(&v.P95)
		fix(&v.P99)
		fix(&v.Max)
		return &v
	}
	c.Summaries = append([]Summary(nil), rep.Summaries...)
	for i := range c.Summaries {
		s := &c.Summaries[i]
		fix(&s.MsgPerSec)
		fix(&s.CPUPer10k)
		fix(&s.HostCPUPer10k)
		fix(&s.BrokerCPUPer10k)
		fix(&s.DBCPUPer10k)
		fix(&s.PublishHostCPUPer10k)
		fix(&s.PublishBrokerCPUPer10k)
		fix(&s.VsBroker)
		fix(&s.VsNaive)
		fix(&s.InboxdVsThis)
		fix(&s.VsBase)
		fix(&s.ReplayRate)
		s.Latency, s.IngestLatency, s.ClaimLatency = fixLat(s.Latency), fixLat(s.IngestLatency), fixLat(s.ClaimLatency)
	}
	c.Measurements = append([]Measurement(nil), rep.Measurements...)
	for i := range c.Measurements {
		m := &c.Measurements[i]
		for _, x := range []*float64{&m.Load, &m.Calibration, &m.DrainSeconds, &m.WallSeconds, &m.MsgPerSec, &m.CPUSeconds, &m.CPUPer10k, &m.HostCPUPer10k, &m.BrokerCPUPer10k, &m.DBCPUPer10k,
			&m.PublishHostCPUPer10k, &m.PublishBrokerCPUPer10k, &m.VsBase, &m.ReplayRate} {
			fix(x)
		}
		m.Latency, m.IngestLatency, m.ClaimLatency = fixLat(m.Latency), fixLat(m.IngestLatency), fixLat(m.ClaimLatency)
	}
	return &c
}
