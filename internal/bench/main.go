package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/stompx"
)

// options are the flags of "inboxd bench".
type options struct {
	Quick bool
	Ns    []int
	Reps  int
	Out   string
	// Markdown, when set, is where the documentation page (docs/benchmarks.md) is written.
	Markdown    string
	Rows        []string
	Knobs       Knobs
	Rate        float64
	HighRate    float64
	E2EDuration time.Duration
	Warmup      int
	// BrokerWarmup messages go through the broker before the first row (see
	// runner.warmBroker).
	BrokerWarmup int
	Dup, Bad     float64
	StompAddr    string
	Broker       string // activemq or rabbitmq: the drain rows' broker
	AdminURL     string
	CPUProfile   bool
	RowTimeout   time.Duration

	// The growth rows (issue 20).
	Backlog      []int // backlog: events blocked behind failed heads, one measurement per level
	BacklogHeads int
	BacklogFresh int
	JournalSize  int // journal-size: settled entries pre-filled

	// ShadowLimit bounds the events the shadow row runs, the oldest of e2e-max's
	// (0: all of them).
	ShadowLimit int
	// The replay-live row: the replay's rate limit (events per second), the processed
	// events it replays (0: enough to outlast the measured phase; replayEvents) and the
	// aggregates they are spread over.
	ReplayRate       float64
	ReplayEvents     int
	ReplayAggregates int

	// River is how the river rows run (river.go).
	River riverSettings

	Sweep         bool
	SweepBatch    []int
	SweepAck      []string
	SweepPrefetch []int
	SweepLinger   []time.Duration
	SweepInFlight []int
}

var allRows = []string{rowBroker, rowNaive, rowIngest, rowIngestPrune, rowE2EMax, rowShadow, rowJournalSize, rowE2ESweeper, rowE2EWebhook, rowReplayLive, rowBacklog}

// quickRows leaves out journal-size, whose 10 M-entry journal takes minutes to write.
var quickRows = []string{rowBroker, rowNaive, rowIngest, rowIngestPrune, rowE2EMax, rowShadow, rowE2ESweeper, rowE2EWebhook, rowReplayLive, rowBacklog}

// baseRows are the rows a row is measured against, in the same repetition: -rows
// brings them along.
var baseRows = map[string][]string{
	rowJournalSize: {rowIngest, rowE2EMax},
	rowShadow:      {rowE2EMax},     // it shadows what e2e-max processed
	rowReplayLive:  {rowE2ESweeper}, // its p99 against e2e-sweeper's at -rate
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parseOptions(args []string, stderr io.Writer) (*options, error) {
	o := &options{Knobs: defaultKnobs()}
	fs := flag.NewFlagSet("inboxd bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ns, rows, sb, sa, sp, sl, si, backlog string
	fs.BoolVar(&o.Quick, "quick", false, "smoke run: N=5000, 1 repetition, 3 s end-to-end rows, backlog 0 and 10000, no journal-size")
	fs.StringVar(&ns, "n", "", "messages per drain row, comma-separated (default 20000,200000; quick 5000)")
	fs.IntVar(&o.Reps, "reps", 0, "repetitions; the table shows medians (default 3; quick 1)")
	fs.StringVar(&o.Out, "out", "", "results directory (default bench-results/<timestamp>)")
	fs.StringVar(&o.Markdown, "markdown", "", "also write the documentation page (header, method, table, row notes) to this file, e.g. docs/benchmarks.md")
	fs.StringVar(&rows, "rows", "", "rows to run, comma-separated (default "+strings.Join(allRows, ",")+", and "+strings.Join(riverRows, ",")+
		" when -river-bin exists; quick without "+rowJournalSize+"; "+rowShadow+" brings "+rowE2EMax+", "+rowReplayLive+" "+rowE2ESweeper+", "+rowJournalSize+" "+rowIngest+" and "+rowE2EMax+")")
	fs.StringVar(&backlog, "backlog", "", "backlog row: events blocked behind failed heads, one measurement per level (default 0,100000,1000000; quick 0,10000)")
	fs.IntVar(&o.BacklogHeads, "backlog-heads", 1000, "backlog row: aggregates whose FAILED head, due in an hour, blocks the backlog")
	fs.IntVar(&o.BacklogFresh, "backlog-fresh", 2000, "backlog row: fresh events of other aggregates drained at each level")
	fs.IntVar(&o.JournalSize, "journal-size", 10_000_000, "journal-size row: settled entries the journal holds before ingest and e2e-max run")
	fs.Float64Var(&o.Rate, "rate", 1000, "end-to-end rows: offered rate, messages per second")
	fs.Float64Var(&o.HighRate, "rate-high", 3000, "e2e-sweeper row: a second offered rate, to show whether a backlog grows (0: off)")
	fs.IntVar(&o.ShadowLimit, "shadow-limit", 20000, "shadow row: the events of e2e-max's it runs over, at most, oldest first (0: all)")
	fs.Float64Var(&o.ReplayRate, "replay-rate", 50, "replay-live row: the replay run's rate limit, events per second")
	fs.IntVar(&o.ReplayEvents, "replay-events", 0, "replay-live row: processed events the replay runs over (default: enough to outlast the measured phase at -replay-rate, at least 1000)")
	fs.IntVar(&o.ReplayAggregates, "replay-aggregates", 50, "replay-live row: aggregates the replayed events are spread over (the live events' are others)")
	fs.DurationVar(&o.E2EDuration, "e2e-duration", 0, "end-to-end rows: how long to publish at -rate (default 20s; quick 3s)")
	fs.IntVar(&o.Warmup, "warmup", 200, "end-to-end rows: messages processed before measuring")
	fs.IntVar(&o.BrokerWarmup, "warmup-broker", 60000, "messages published and drained through a scratch queue before the first row, so that no row measures the broker's JIT warm-up (0: off)")
	fs.Float64Var(&o.Dup, "dup", 0.30, "drain rows: share of duplicate messages")
	fs.Float64Var(&o.Bad, "malformed", 0.01, "drain rows: share of malformed messages")
	fs.StringVar(&o.Broker, "broker", "activemq", "broker of every row: activemq, or rabbitmq (its STOMP plugin; ratios are against its own bare drain)")
	fs.StringVar(&o.StompAddr, "stomp-addr", os.Getenv("INBOXD_STOMP_ADDR"), "broker STOMP address (env INBOXD_STOMP_ADDR; default 127.0.0.1:61613 for activemq, 127.0.0.1:61623 for rabbitmq)")
	fs.StringVar(&o.AdminURL, "admin-url", envOr("INBOXD_BENCH_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"database server where each row creates (and drops) a database of its own (env INBOXD_BENCH_ADMIN_URL)")
	fs.BoolVar(&o.CPUProfile, "cpuprofile", false, "write a pprof CPU profile of every row's child into the results directory")
	fs.DurationVar(&o.RowTimeout, "row-timeout", 10*time.Minute, "give up on a row after this long")
	o.River.register(fs)
	fs.BoolVar(&o.Sweep, "sweep", false, "run the ingest row once per configuration of the -sweep-* matrix (with -rows unset, only it and the broker row)")
	fs.StringVar(&sb, "sweep-batch", "100,500,1000", "sweep: batch sizes")
	fs.StringVar(&sa, "sweep-ack", "client,client-individual", "sweep: ack modes")
	fs.StringVar(&sp, "sweep-prefetch", "", "sweep: prefetch sizes (default: -prefetch)")
	fs.StringVar(&sl, "sweep-linger", "", "sweep: linger durations (default: -linger)")
	fs.StringVar(&si, "sweep-inflight", "", "sweep: commits in flight (default: -commits-in-flight)")
	o.Knobs.register(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if err := setBroker(o.Broker); err != nil {
		return nil, err
	}
	if o.StompAddr == "" {
		o.StompAddr = defaultStompAddr(o.Broker)
	}
	var err error
	if ns == "" {
		ns = "20000,200000"
		if o.Quick {
			ns = "5000"
		}
	}
	if o.Ns, err = intList(ns); err != nil {
		return nil, fmt.Errorf("-n: %w", err)
	}
	if o.Reps == 0 {
		o.Reps = 3
		if o.Quick {
			o.Reps = 1
		}
	}
	if o.E2EDuration == 0 {
		o.E2EDuration = 20 * time.Second
		if o.Quick {
			o.E2EDuration = 3 * time.Second
		}
	}
	if backlog == "" {
		backlog = "0,100000,1000000"
		if o.Quick {
			backlog = "0,10000"
		}
	}
	if o.Backlog, err = levelList(backlog); err != nil {
		return nil, fmt.Errorf("-backlog: %w", err)
	}
	if err := o.River.resolve(); err != nil {
		return nil, err
	}
	if rows == "" && o.Sweep {
		// The matrix is ingest's, read against the bare broker of the same repetition;
		// the other rows would only repeat themselves (a 10 M journal-size fill among them).
		rows = rowBroker + "," + rowIngest
	}
	if rows == "" {
		rows = strings.Join(allRows, ",")
		if o.Quick {
			rows = strings.Join(quickRows, ",")
		}
		if o.River.found() && target.broker != stompx.BrokerRabbitMQ {
			rows += "," + strings.Join(riverRows, ",")
		}
	}
	for _, r := range strings.Split(rows, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		if !contains(allRows, r) && !contains(riverRows, r) {
			return nil, fmt.Errorf("-rows: unknown row %q (have %s, %s)", r, strings.Join(allRows, ", "), strings.Join(riverRows, ", "))
		}
		if contains(riverRows, r) && target.broker == stompx.BrokerRabbitMQ {
			return nil, fmt.Errorf("-rows: row %s runs against ActiveMQ only (its consumer speaks ActiveMQ's dialect)", r)
		}
		if contains(riverRows, r) && !o.River.found() {
			return nil, fmt.Errorf("-rows: row %s needs %s (make build builds it; or -river-bin)", r, o.River.Bin)
		}
		o.Rows = append(o.Rows, r)
	}
	for _, r := range o.Rows { // measured against these, in the same repetition
		for _, base := range baseRows[r] {
			if !contains(o.Rows, base) {
				o.Rows = append(o.Rows, base)
			}
		}
	}
	if o.Sweep {
		if o.SweepBatch, err = intList(sb); err != nil {
			return nil, fmt.Errorf("-sweep-batch: %w", err)
		}
		o.SweepAck = strings.Split(sa, ",")
		if sp == "" {
			sp = strconv.Itoa(o.Knobs.Prefetch)
		}
		if o.SweepPrefetch, err = intList(sp); err != nil {
			return nil, fmt.Errorf("-sweep-prefetch: %w", err)
		}
		if si == "" {
			si = strconv.Itoa(o.Knobs.InFlight)
		}
		if o.SweepInFlight, err = intList(si); err != nil {
			return nil, fmt.Errorf("-sweep-inflight: %w", err)
		}
		if sl == "" {
			sl = o.Knobs.Linger.String()
		}
		for _, s := range strings.Split(sl, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("-sweep-linger: %w", err)
			}
			o.SweepLinger = append(o.SweepLinger, d)
		}
	}
	switch {
	case o.Reps < 1:
		return nil, errors.New("-reps must be at least 1")
	case o.Rate <= 0:
		return nil, errors.New("-rate must be positive")
	case o.Dup < 0 || o.Bad < 0 || o.Dup+o.Bad >= 1:
		return nil, errors.New("-dup and -malformed must be non-negative and sum to less than 1")
	case o.BacklogHeads < 1 || o.BacklogFresh < 1 || o.JournalSize < 1:
		return nil, errors.New("-backlog-heads, -backlog-fresh and -journal-size must be at least 1")
	case o.ReplayRate <= 0 || o.ReplayEvents < 0 || o.ReplayAggregates < 1 || o.ShadowLimit < 0:
		return nil, errors.New("-replay-rate must be positive, -replay-events and -shadow-limit at least 0 and -replay-aggregates at least 1")
	}
	tracedPublish.Store(o.Knobs.Tracing) // this process may publish (bench/tracing.go)
	if err := o.Knobs.validate(); err != nil {
		return nil, err
	}
	if o.Out == "" {
		o.Out = filepath.Join("bench-results", time.Now().Format("20060102-150405"))
	}
	return o, nil
}

// intList parses a comma-separated list of positive whole numbers.
func intList(s string) ([]int, error) { return wholeList(s, 1) }

// levelList parses a comma-separated list of whole numbers, 0 allowed.
func levelList(s string) ([]int, error) { return wholeList(s, 0) }

// wholeList parses a comma-separated list of whole numbers of at least min.
func wholeList(s string, min int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < min {
			return nil, fmt.Errorf("%q is not a whole number of at least %d", f, min)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func contains[T comparable](xs []T, x T) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// ingestConfigs is the ingest row's configurations: one, or the sweep matrix.
func (o *options) ingestConfigs() []Knobs {
	if !o.Sweep {
		return []Knobs{o.Knobs}
	}
	var out []Knobs
	for _, b := range o.SweepBatch {
		for _, a := range o.SweepAck {
			for _, p := range o.SweepPrefetch {
				for _, l := range o.SweepLinger {
					for _, f := range o.SweepInFlight {
						k := o.Knobs
						k.BatchSize, k.AckMode, k.Prefetch, k.Linger, k.InFlight = b, strings.TrimSpace(a), p, l, f
						out = append(out, k)
					}
				}
			}
		}
	}
	return out
}

// Main runs the benchmark ("inboxd bench") and prints one table; it also writes
// results.json, results.md and results.svg under -out.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	for _, k := range o.ingestConfigs() {
		if err := k.validate(); err != nil {
			return fmt.Errorf("sweep configuration %s: %w", k.label(rowIngest), err)
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("creating results directory: %w", err)
	}
	rep := &Report{
		Started:  time.Now().UTC(),
		Host:     hostInfo(),
		Settings: o.settings(),
	}
	r := &runner{o: o, log: stderr}
	r.logf("CPU calibration: %.2f s to SHA-256 %d MiB on one core (lower is faster); load %.2f", rep.Host.CalibrationBefore, calibrationMiB, rep.Host.LoadBefore)
	started := time.Now()
	runErr := r.run(ctx, rep)
	rep.Finished = time.Now().UTC()
	rep.Seconds = time.Since(started).Seconds()
	rep.Host.LoadAfter, rep.Host.CalibrationAfter = loadAvg(), calibrate(0)
	rep.Summaries = summarizeAll(rep.Measurements)
	if len(rep.Measurements) > 0 {
		if err := writeTable(stdout, rep); err != nil {
			return err
		}
		if err := writeFiles(o.Out, rep); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nresults: %s/{results.json,results.md,results.svg}\n", o.Out)
		if o.Markdown != "" {
			info := pageInfo{Commit: buildCommit(), Command: strings.TrimSpace("inboxd bench " + strings.Join(args, " "))}
			if err := writeDocsPageFile(o.Markdown, rep, info); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "documentation page: %s\n", o.Markdown)
		}
	}
	if runErr != nil {
		return runErr
	}
	for _, s := range rep.Summaries {
		if !s.OK {
			return fmt.Errorf("row %s (%s, N=%d) failed its check: %s", s.Row, s.Config, s.N, s.Check)
		}
	}
	return nil
}

func (o *options) settings() map[string]any {
	return map[string]any{
		"quick": o.Quick, "n": o.Ns, "reps": o.Reps, "rows": o.Rows, "knobs": o.Knobs,
		"rate": o.Rate, "rate_high": o.HighRate, "e2e_duration": o.E2EDuration.String(), "warmup": o.Warmup, "warmup_broker": o.BrokerWarmup,
		"dup_ratio": o.Dup, "malformed_ratio": o.Bad, "sweep": o.Sweep, "stomp_addr": o.StompAddr, "broker": o.Broker,
		"river":   o.River,
		"backlog": o.Backlog, "backlog_heads": o.BacklogHeads, "backlog_fresh": o.BacklogFresh, "journal_size": o.JournalSize,
		"shadow_limit": o.ShadowLimit, "replay_rate": o.ReplayRate, "replay_events": o.replayEvents(), "replay_aggregates": o.ReplayAggregates,
	}
}

func hostInfo() Host {
	h := Host{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH,
		LoadBefore: loadAvg(), CalibrationBefore: calibrate(0)}
	h.Name, _ = os.Hostname()
	return h
}
