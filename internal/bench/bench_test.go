package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/testenv"
)

// TestMain lets the test binary stand in for inboxd: Main re-executes os.Executable()
// with "bench-row", which lands here. The tests themselves run under testenv.Main.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "bench-row" {
		if err := RowMain(context.Background(), os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "bench-row:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testenv.Main(m)
}

func TestPercentile(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(i + 1)
	}
	tests := []struct {
		name string
		in   []float64
		p    float64
		want float64
	}{
		{"single", []float64{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50},
		{"p95 of 1..100", hundred, 95, 95},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 is the max", hundred, 100, 100},
		{"tiny p is the min", hundred, 0.001, 1},
		{"p50 of two", []float64{1, 2}, 50, 1},
		{"p99 of ten is the max", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.in, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %v, want %v", len(tt.in), tt.p, got, tt.want)
			}
		})
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("percentile of nothing must be NaN")
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5}, 5},
		{[]float64{math.NaN(), 1, 3}, 2},
	}
	for _, tt := range tests {
		in := append([]float64(nil), tt.in...)
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
		for i := range in {
			if in[i] != tt.in[i] && !math.IsNaN(in[i]) {
				t.Errorf("median modified its input")
			}
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing must be NaN")
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := summarize(ds)
	want := Latency{Count: 100, P50: 50, P95: 95, P99: 99, Max: 100}
	if l != want {
		t.Errorf("summarize = %+v, want %+v", l, want)
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("summarize sorted its input")
	}
	if e := summarize(nil); e.Count != 0 || !math.IsNaN(e.P99) {
		t.Errorf("summarize(nil) = %+v", e)
	}
}

func TestFromRusage(t *testing.T) {
	ru := &syscall.Rusage{}
	ru.Utime.Sec, ru.Utime.Usec = 1, 500000
	ru.Stime.Sec, ru.Stime.Usec = 0, 250000
	ru.Maxrss = 2048
	tests := []struct {
		goos    string
		wantRSS int64
	}{
		{"linux", 2048 * 1024}, // KiB
		{"darwin", 2048},       // bytes
	}
	for _, tt := range tests {
		t.Run(tt.goos, func(t *testing.T) {
			u := fromRusage(ru, tt.goos)
			if u.CPU() != 1750*time.Millisecond || u.User != 1500*time.Millisecond {
				t.Errorf("cpu = %v (user %v), want 1.75s (user 1.5s)", u.CPU(), u.User)
			}
			if u.MaxRSS != tt.wantRSS {
				t.Errorf("maxrss = %d, want %d", u.MaxRSS, tt.wantRSS)
			}
		})
	}
}

func TestUsageOfRealProcess(t *testing.T) {
	if _, err := usageOf(nil); err == nil {
		t.Error("usageOf(nil) must fail")
	}
	p, err := os.StartProcess("/bin/true", []string{"true"}, &os.ProcAttr{})
	if err != nil {
		t.Skipf("no /bin/true: %v", err)
	}
	ps, err := p.Wait()
	if err != nil {
		t.Fatal(err)
	}
	u, err := usageOf(ps)
	if err != nil {
		t.Fatal(err)
	}
	if u.MaxRSS <= 0 {
		t.Errorf("maxrss of a real process = %d", u.MaxRSS)
	}
}

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want time.Duration
	}{
		{"busy fields only", "cpu  100 5 50 9999 333 10 20 30 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n", 215 * 10 * time.Millisecond},
		{"garbage", "cpu a b c d e f g h\n", 0},
		{"no cpu line", "intr 1 2 3\n", 0},
		{"empty", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseProcStat([]byte(tt.in)); got != tt.want {
				t.Errorf("parseProcStat = %v, want %v", got, tt.want)
			}
		})
	}
}

func FuzzParseProcStat(f *testing.F) {
	f.Add([]byte("cpu  100 5 50 9999 333 10 20 30 0 0\n"))
	f.Add([]byte("cpu 1 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d := parseProcStat(b); d < 0 {
			t.Errorf("negative busy time %v", d)
		}
	})
}

func TestGenerate(t *testing.T) {
	tests := []struct {
		name                       string
		mix                        Mix
		wantUnique, wantBad, wantN int
	}{
		{"default mix", Mix{N: 1000, DupRatio: 0.3, MalformedRatio: 0.01, Seed: 1}, 690, 10, 1000},
		{"no duplicates", Mix{N: 100, Seed: 2}, 100, 0, 100},
		{"tiny", Mix{N: 3, DupRatio: 0.3, MalformedRatio: 0.01, Seed: 3}, 2, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Generate(tt.mix)
			if len(c.Bodies) != tt.wantN || len(c.IDs) != tt.wantUnique || c.Malformed != tt.wantBad {
				t.Fatalf("got %d bodies, %d ids, %d malformed; want %d, %d, %d",
					len(c.Bodies), len(c.IDs), c.Malformed, tt.wantN, tt.wantUnique, tt.wantBad)
			}
			ids := map[string]bool{}
			bad := map[string]bool{}
			for _, b := range c.Bodies {
				ev, err := message.Decode(b, func(string) string { return "" }, message.Options{})
				if err != nil {
					var inv *message.Invalid
					if !errors.As(err, &inv) {
						t.Fatalf("decode error is not *Invalid: %v", err)
					}
					bad[string(b)] = true
					continue
				}
				ids[ev.ID] = true
			}
			if len(ids) != tt.wantUnique || len(bad) != tt.wantBad {
				t.Errorf("decoded %d distinct ids and %d distinct bad bodies, want %d and %d", len(ids), len(bad), tt.wantUnique, tt.wantBad)
			}
			for _, id := range c.IDs {
				if !ids[id] {
					t.Errorf("id %s is listed but never sent", id)
				}
			}
			again := Generate(tt.mix)
			for i := range c.Bodies {
				if !bytes.Equal(c.Bodies[i], again.Bodies[i]) {
					t.Fatal("Generate is not deterministic")
				}
			}
		})
	}
}

func TestRegistrationBodySentAt(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	var v map[string]any
	if err := json.Unmarshal(registrationBody("0b6a8f6e-5b4c-4d7e-8f9a-1b2c3d4e5f60", 7, at, at), &v); err != nil {
		t.Fatal(err)
	}
	got, err := time.Parse(time.RFC3339Nano, v["sentAt"].(string))
	if err != nil || !got.Equal(at) {
		t.Errorf("sentAt = %v (%v), want %v", v["sentAt"], err, at)
	}
}

func TestParseOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, o *options)
		wantErr bool
	}{
		{"full defaults", nil, func(t *testing.T, o *options) {
			if fmt.Sprint(o.Ns) != "[20000 200000]" || o.Reps != 3 || o.E2EDuration != 20*time.Second || len(o.ingestConfigs()) != 1 {
				t.Errorf("defaults: %+v", o)
			}
		}, false},
		{"quick", []string{"-quick"}, func(t *testing.T, o *options) {
			if fmt.Sprint(o.Ns) != "[5000]" || o.Reps != 1 || o.E2EDuration != 3*time.Second || fmt.Sprint(o.Backlog) != "[0 10000]" {
				t.Errorf("quick: %+v", o)
			}
			if contains(o.Rows, rowJournalSize) || !contains(o.Rows, rowBacklog) || !contains(o.Rows, rowShadow) || !contains(o.Rows, rowReplayLive) {
				t.Errorf("quick rows %v: want backlog, shadow, replay-live and no journal-size (minutes to fill)", o.Rows)
			}
		}, false},
		{"sweep matrix", []string{"-sweep", "-sweep-batch=100,500,1000", "-sweep-ack=client,client-individual", "-sweep-linger=5ms,20ms"}, func(t *testing.T, o *options) {
			if got := len(o.ingestConfigs()); got != 12 {
				t.Errorf("sweep configs = %d, want 12", got)
			}
			if fmt.Sprint(o.Rows) != "[broker ingest]" {
				t.Errorf("sweep rows %v, want [broker ingest]", o.Rows)
			}
		}, false},
		{"sweep with rows of its own", []string{"-sweep", "-rows=ingest,e2e-max"}, func(t *testing.T, o *options) {
			if fmt.Sprint(o.Rows) != "[ingest e2e-max]" {
				t.Errorf("rows %v", o.Rows)
			}
		}, false},
		{"journal-size brings its baselines", []string{"-rows=journal-size", "-journal-size=1000"}, func(t *testing.T, o *options) {
			if fmt.Sprint(o.Rows) != "[journal-size ingest e2e-max]" || o.JournalSize != 1000 {
				t.Errorf("rows %v, journal size %d", o.Rows, o.JournalSize)
			}
		}, false},
		{"backlog levels", []string{"-backlog=0,500"}, func(t *testing.T, o *options) {
			if fmt.Sprint(o.Backlog) != "[0 500]" || o.JournalSize != 10_000_000 {
				t.Errorf("backlog %v, journal size %d", o.Backlog, o.JournalSize)
			}
		}, false},
		{"rabbitmq's node by default", []string{"-broker=rabbitmq"}, func(t *testing.T, o *options) {
			if o.StompAddr != "127.0.0.1:61623" || target.broker != "rabbitmq" || target.login != "guest" {
				t.Errorf("broker %s at %s as %q", target.broker, o.StompAddr, target.login)
			}
		}, false},
		{"shadow brings e2e-max, replay-live e2e-sweeper", []string{"-rows=shadow,replay-live", "-replay-rate=20", "-replay-aggregates=5"}, func(t *testing.T, o *options) {
			if fmt.Sprint(o.Rows) != "[shadow replay-live e2e-max e2e-sweeper]" || o.ReplayRate != 20 || o.ReplayAggregates != 5 || o.ShadowLimit != 20000 {
				t.Errorf("rows %v, replay rate %v over %d aggregates, shadow limit %d", o.Rows, o.ReplayRate, o.ReplayAggregates, o.ShadowLimit)
			}
			// Enough history for the replay to outlast the 20 s phase at its limit.
			if got := o.replayEvents(); got != 1000 {
				t.Errorf("replay events = %d, want 1000 (the floor; 20/s × 50 s)", got)
			}
		}, false},
		{"replay events follow the rate and the duration", []string{"-rows=replay-live", "-replay-rate=100", "-e2e-duration=30s"}, func(t *testing.T, o *options) {
			if got := o.replayEvents(); got != 6000 {
				t.Errorf("replay events = %d, want 6000 (100/s × (30 s + 30 s))", got)
			}
		}, false},
		{"replay events set", []string{"-replay-events=300"}, func(t *testing.T, o *options) {
			if got := o.replayEvents(); got != 300 || !contains(o.Rows, rowShadow) || !contains(o.Rows, rowReplayLive) {
				t.Errorf("replay events = %d, rows %v", got, o.Rows)
			}
		}, false},
		{"bad replay rate", []string{"-replay-rate=0"}, nil, true},
		{"bad replay aggregates", []string{"-replay-aggregates=0"}, nil, true},
		{"bad shadow limit", []string{"-shadow-limit=-1"}, nil, true},
		{"unknown broker", []string{"-broker=kafka"}, nil, true},
		{"bad backlog", []string{"-backlog=-1"}, nil, true},
		{"river rows need their binary", []string{"-rows=river", "-river-bin=/nonexistent/inboxd-river"}, nil, true},
		{"river rows by default when the binary exists", []string{"-river-bin=" + os.Args[0]}, func(t *testing.T, o *options) {
			if !contains(o.Rows, rowRiver) || !contains(o.Rows, rowRiverIngest) || o.River.Workers != 200 || o.River.FetchCooldown != 10*time.Millisecond {
				t.Errorf("rows %v, river %+v", o.Rows, o.River)
			}
		}, false},
		{"unknown row", []string{"-rows=broker,nope"}, nil, true},
		{"bad ack mode", []string{"-ack-mode=auto"}, nil, true},
		{"bad n", []string{"-n=0"}, nil, true},
		{"ratios too big", []string{"-dup=0.9", "-malformed=0.2"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.check != nil {
				tt.check(t, o)
			}
		})
	}
}

func TestKnobsRoundTrip(t *testing.T) {
	k := Knobs{BatchSize: 123, Linger: 7 * time.Millisecond, Prefetch: 999, AckMode: "client-individual",
		PoolSize: 3, Concurrency: 5, SweepInterval: 50 * time.Millisecond, FeedFlush: 70 * time.Millisecond, Tracing: true}
	a := rowArgs{Row: rowIngest, Queue: "/queue/x", N: 10, Broker: "rabbitmq", Knobs: k}
	// Parse the child's flags the way RowMain does, without running a row.
	got := defaultKnobs()
	fs := newFlagSet()
	got.register(fs)
	var row, queue, db, addr, prof, broker string
	var n int
	fs.StringVar(&row, "row", "", "")
	fs.StringVar(&queue, "queue", "", "")
	fs.IntVar(&n, "n", 0, "")
	fs.StringVar(&db, "db-url", "", "")
	fs.StringVar(&addr, "stomp-addr", "", "")
	fs.StringVar(&prof, "cpuprofile", "", "")
	fs.StringVar(&broker, "broker", "", "")
	if err := fs.Parse(a.args()); err != nil {
		t.Fatal(err)
	}
	if got != k || row != rowIngest || queue != "/queue/x" || n != 10 || broker != "rabbitmq" {
		t.Errorf("round trip: got %+v row=%s queue=%s n=%d broker=%s", got, row, queue, n, broker)
	}
}

func sampleReport() *Report {
	lat := &Latency{Count: 3000, P50: 110, P95: 190, P99: 240, Max: 400}
	ms := []Measurement{
		{Row: rowBroker, Config: "auto", N: 100, Rep: 1, MsgPerSec: 10000, CPUPer10k: 0.1, PeakRSSBytes: 10 << 20, OK: true, Check: "ok", Load: 0.5, Calibration: 1.25},
		{Row: rowNaive, Config: "naive", N: 100, Rep: 1, MsgPerSec: 2000, CPUPer10k: 1, PeakRSSBytes: 12 << 20, OK: true, Check: "ok"},
		{Row: rowIngest, Config: "batch=500 <&>", N: 100, Rep: 1, MsgPerSec: 9000, CPUPer10k: 0.5, PeakRSSBytes: 20 << 20, OK: true, Check: "ok"},
		{Row: rowBroker, Config: "auto", N: 100, Rep: 2, MsgPerSec: 12000, CPUPer10k: 0.1, PeakRSSBytes: 11 << 20, OK: true, Check: "ok", Load: 1.75, Calibration: 2.5},
		{Row: rowNaive, Config: "naive", N: 100, Rep: 2, MsgPerSec: 3000, CPUPer10k: 1, PeakRSSBytes: 12 << 20, OK: true, Check: "ok"},
		{Row: rowIngest, Config: "batch=500 <&>", N: 100, Rep: 2, MsgPerSec: 10800, CPUPer10k: 0.7, PeakRSSBytes: 25 << 20, OK: false, Check: "journal=1"},
		{Row: rowRiverIngest, Config: "river", N: 100, Rep: 1, MsgPerSec: 6000, OK: true, Check: "ok"},
		{Row: rowRiverIngest, Config: "river", N: 100, Rep: 2, MsgPerSec: 9000, OK: true, Check: "ok"},
		{Row: rowE2ESweeper, Config: "e2e", N: 3000, Rep: 1, MsgPerSec: 1000, Latency: lat, OK: true, Check: "ok"},
		{Row: rowE2EWebhook, Config: "e2e", N: 3000, Rep: 1, MsgPerSec: math.NaN(), OK: true, Check: "ok",
			Latency: &Latency{P50: math.NaN(), P95: math.NaN(), P99: math.NaN(), Max: math.NaN()}},
	}
	rep := &Report{Started: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Host: Host{CPUs: 2, CalibrationBefore: 1.11, CalibrationAfter: 2.22}, Settings: map[string]any{"reps": 2}, Measurements: ms}
	rep.Summaries = summarizeAll(ms)
	return rep
}

func TestCalibrate(t *testing.T) {
	// A sample is scaled to the header's 300 MiB: on any machine, hashing 30 MiB and
	// scaling takes about as long as the whole would, far from the 10× of an unscaled one.
	// Each is the fastest of three, taken in turn, so that a burst of load on a shared
	// machine during one of them does not decide the comparison.
	whole, sample := calibrate(0), calibrate(rowCalibrationMiB)
	for range 2 {
		whole, sample = min(whole, calibrate(0)), min(sample, calibrate(rowCalibrationMiB))
	}
	if whole <= 0 || sample <= 0 || sample > 4*whole || whole > 4*sample {
		t.Errorf("calibrate(0) = %.3f s, calibrate(%d) = %.3f s: not on one scale", whole, rowCalibrationMiB, sample)
	}
}

func TestSummarizeAll(t *testing.T) {
	s := sampleReport().Summaries
	if len(s) != 6 {
		t.Fatalf("got %d summaries, want 6", len(s))
	}
	// River's rows are set beside inboxd's counterpart of the same repetition: ingest
	// 9000/6000 and 10800/9000.
	if riv := s[3]; math.Abs(riv.InboxdVsThis-1.35) > 1e-9 || !strings.Contains(riv.Check, "ingest 1.35× this") {
		t.Errorf("river-ingest summary = %+v", riv)
	}
	ing := s[2]
	// Ratios per repetition: 0.9 and 0.9 against the broker, 4.5 and 3.6 against naive.
	if math.Abs(ing.VsBroker-0.9) > 1e-9 || math.Abs(ing.VsNaive-4.05) > 1e-9 {
		t.Errorf("ingest ratios = %v, %v; want 0.9, 4.05", ing.VsBroker, ing.VsNaive)
	}
	if ing.MsgPerSec != 9900 || ing.PeakRSSBytes != 25<<20 || ing.OK || !strings.Contains(ing.Check, "rep 2") {
		t.Errorf("ingest summary = %+v", ing)
	}
	e2e := s[4]
	if e2e.Latency == nil || e2e.Latency.P99 != 240 || math.Abs(e2e.VsBroker-0.1) > 1e-9 {
		t.Errorf("e2e summary = %+v (latency %+v)", e2e, e2e.Latency)
	}
}

func TestRender(t *testing.T) {
	rep := sampleReport()
	var table bytes.Buffer
	if err := writeTable(&table, rep); err != nil {
		t.Fatal(err)
	}
	// The machine's conditions: the calibration before and after in the caption, and
	// each row's load and calibration span over its repetitions.
	for _, want := range []string{"vs broker", "0.90×", "4.05×", "110 / 190 / 240", "rep 2: journal=1",
		"calibration 1.11 → 2.22 s", "0.50–1.75", "1.25–2.50"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var md bytes.Buffer
	if err := writeMarkdown(&md, rep); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Count(md.String(), "\n| "); lines != 7 { // header, separator, 6 rows
		t.Errorf("markdown has %d table lines, want 7:\n%s", lines, md.String())
	}

	var svg bytes.Buffer
	if err := writeSVG(&svg, rep); err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(&svg)
	rects := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("svg is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	if rects != 1+6+3*2 { // background, throughput bars, 3 percentiles per e2e row
		t.Errorf("svg has %d rects, want 13", rects)
	}

	dir := t.TempDir()
	if err := writeFiles(dir, rep); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dir + "/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("results.json does not parse: %v", err)
	}
	if len(back.Summaries) != 6 || len(back.Measurements) != 10 {
		t.Errorf("results.json round trip lost rows: %d summaries, %d measurements", len(back.Summaries), len(back.Measurements))
	}
}

// runMain runs Main with args and a results directory of the test's own, and returns
// the report it wrote and its stdout.
func runMain(t *testing.T, args ...string) (*Report, string) {
	t.Helper()
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := Main(ctx, append(args, "-out="+dir), &stdout, &stderr); err != nil {
		t.Fatalf("Main: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	b, err := os.ReadFile(dir + "/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep, stdout.String()
}

// TestBenchRabbitMQDrainRows runs the drain rows against the RabbitMQ node
// (-broker rabbitmq): each row checks its journal, and the ratios are against
// RabbitMQ's own bare drain.
func TestBenchRabbitMQDrainRows(t *testing.T) {
	r := testenv.Rabbit(t)
	testenv.NewDB(t)
	if testing.Short() {
		t.Skip("integration test")
	}
	rep, stdout := runMain(t, "-broker=rabbitmq", "-stomp-addr="+r.Addr, "-n=300", "-reps=1", "-rows=broker,naive,ingest",
		"-warmup-broker=0", "-admin-url="+testenv.AdminURL())
	if len(rep.Summaries) != 3 {
		t.Fatalf("got %d rows, want 3:\n%s", len(rep.Summaries), stdout)
	}
	for _, s := range rep.Summaries {
		if !s.OK || s.MsgPerSec <= 0 || (s.Row == rowBroker && s.VsBroker != 1) {
			t.Errorf("row %s: %+v", s.Row, s)
		}
	}
}

// TestBenchSmall runs Main end to end on a tiny N against the real broker and
// database: it fails in CI when either is missing.
func TestBenchSmall(t *testing.T) {
	testenv.Broker(t)
	testenv.NewDB(t) // the same availability check for PostgreSQL
	if testing.Short() {
		t.Skip("integration test")
	}
	rows := []string{}
	for _, r := range allRows {
		if available[r] {
			rows = append(rows, r)
		}
	}
	rep, stdout := runMain(t, "-n=300", "-reps=1", "-rows="+strings.Join(rows, ","),
		"-rate=200", "-rate-high=400", "-e2e-duration=1s", "-warmup=20", "-backlog=0,500", "-backlog-fresh=100", "-journal-size=2000",
		"-replay-events=500", "-replay-aggregates=10", "-warmup-broker=0",
		"-admin-url="+testenv.AdminURL(), "-stomp-addr="+testenv.StompAddr())
	// e2e-sweeper runs at -rate and at -rate-high, journal-size for ingest and e2e-max,
	// backlog at both levels.
	if len(rep.Summaries) != len(rows)+3 {
		t.Fatalf("got %d rows, want %d:\n%s", len(rep.Summaries), len(rows)+3, stdout)
	}
	for _, s := range rep.Summaries {
		if !s.OK || s.MsgPerSec <= 0 || s.PeakRSSBytes <= 0 || s.CPUPer10k <= 0 {
			t.Errorf("row %s: %+v", s.Row, s)
		}
		// The host's, not the broker's: 300 messages may cost the broker less than the 10 ms
		// a /proc tick counts.
		if drained := s.Row == rowIngest || s.Row == rowE2EMax; drained && s.PublishHostCPUPer10k <= 0 {
			t.Errorf("row %s: publishing's cost not measured: %+v", s.Row, s)
		}
		if (s.Row == rowBacklog) != (s.ClaimLatency != nil) {
			t.Errorf("row %s: claim latency %+v", s.Row, s.ClaimLatency)
		}
		if s.Row == rowJournalSize && s.Slowdown <= 0 {
			t.Errorf("row %s (%s): no ratio to the empty journal", s.Row, s.Config)
		}
		// Set beside their base rows: shadow's rate beside e2e-max's, replay-live's p99
		// beside e2e-sweeper's, with the replay's own rate.
		if base := s.Row == rowShadow || s.Row == rowReplayLive; base != (s.VsBase > 0) {
			t.Errorf("row %s: ratio to its base row %v", s.Row, s.VsBase)
		}
		if (s.Row == rowReplayLive) != (s.ReplayRate > 0) {
			t.Errorf("row %s: replay rate %v", s.Row, s.ReplayRate)
		}
	}
}

func TestParsePIDStat(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want pidStat
		ok   bool
	}{
		{"postgres", "123 (postgres) S 1 123 123 0 -1 4194304 100 0 0 0 40 10 3 2 20 0 1 0 100 1000 10", pidStat{"postgres", 1, 50, 5}, true},
		{"name with space and paren", "7 (a b) c) R 9 2 3 4 5 6 7 8 9 10 1 2 3 4 5", pidStat{"a b) c", 9, 3, 7}, true},
		{"truncated", "7 (java) R 1 2 3", pidStat{}, false},
		{"no parens", "garbage", pidStat{}, false},
		{"negative", "7 (java) R 1 2 3 4 5 6 7 8 9 10 -1 2 3 4", pidStat{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parsePIDStat(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("parsePIDStat = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
	if st, ok := readPIDStat(os.Getpid()); !ok || st.ppid != os.Getppid() {
		t.Errorf("reading this process's own stat: %+v, %v", st, ok)
	}
}

func FuzzParsePIDStat(f *testing.F) {
	f.Add("123 (postgres) S 1 123 123 0 -1 4194304 100 0 0 0 40 10 3 2 20 0 1 0 100 1000 10")
	f.Add("1 ()) R")
	f.Fuzz(func(t *testing.T, s string) {
		if st, ok := parsePIDStat(s); ok && (st.self < 0 || st.children < 0) {
			t.Errorf("negative ticks %+v from %q", st, s)
		}
	})
}

func TestListeners(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:F0AD 00000000:0000 0A 00000000:00000000 00:00000000 00000000   110        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1538 00000000:0000 0A 00000000:00000000 00:00000000 00000000   104        0 777 1 0000000000000000 100 0 0 10 0
   2: 0100007F:F0AD 0100007F:A000 01 00000000:00000000 00:00000000 00000000   110        0 999 1 0000000000000000 20 4 30 10 -1
`
	got := listeners(table)
	if len(got) != 2 || got[61613] != "4242" || got[5432] != "777" {
		t.Errorf("listeners = %v", got)
	}
}

func TestParseVmHWM(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
	}{
		{"real layout", "Name:\tbench\nVmPeak:\t  800000 kB\nVmHWM:\t   25600 kB\nVmRSS:\t   20000 kB\n", 25600 << 10},
		{"missing", "Name:\tbench\n", 0},
		{"bad unit", "VmHWM:\t 12 MB\n", 0},
		{"garbage", "VmHWM:\t x kB\n", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseVmHWM([]byte(tt.in)); got != tt.want {
				t.Errorf("parseVmHWM = %d, want %d", got, tt.want)
			}
		})
	}
	if selfPeakRSS() <= 0 {
		t.Error("no VmHWM for this process")
	}
}

func FuzzParseVmHWM(f *testing.F) {
	f.Add([]byte("VmHWM:\t   25600 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n := parseVmHWM(b); n < 0 {
			t.Errorf("negative peak %d", n)
		}
	})
}

// The statements of an e2e-max row are told apart by their text as pg_stat_statements
// shows them: the demo handler's, ingest's, BEGIN/COMMIT, the bench's own, and the rest,
// processing's.
func TestWhoseStatement(t *testing.T) {
	for _, tt := range []struct{ q, want string }{
		{"INSERT INTO customers (id, jurisdiction, email, name, registered_at)\n\t\tSELECT $1", "handler"},
		{"WITH ins AS (\n\tINSERT INTO outbox (id, destination, headers, body, grp, seq) SELECT $1", "handler"},
		{"WITH input AS (\n\tSELECT t.id::UUID AS id", "ingest"},
		{"SET LOCAL plan_cache_mode = force_generic_plan", "ingest"},
		{"SET LOCAL enable_seqscan = off", "ingest"},
		{"BEGIN", "tx"},
		{"COMMIT", "tx"},
		{"SELECT count(*) FROM journal_state WHERE status IN ($1, $2)", "bench"},
		{"SELECT s.query FROM pg_stat_statements AS s", "bench"},
		{"WITH r AS (\n\tSELECT * FROM unnest($1::UUID[])) UPDATE journal_state", "processing"},
		{"SAVEPOINT inboxd_handler", "processing"},
		{"SET LOCAL statement_timeout = 30000", "processing"},
		{"CREATE TABLE IF NOT EXISTS journal_attempt (journal_id UUID NOT NULL)", "bench"},
		{"CREATE INDEX IF NOT EXISTS outbox_group_order ON outbox (grp, seq)", "bench"},
	} {
		if got := whose(tt.q); got != tt.want {
			t.Errorf("whose(%q) = %q, want %q", tt.q, got, tt.want)
		}
	}
}
