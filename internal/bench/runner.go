package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

// runner executes the plan of rows for Main.
type runner struct {
	o        *options
	log      io.Writer
	pids     servicePIDs
	template *freshDB // the journal-size row's pre-filled database, made once per run
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.log, "bench: "+format+"\n", args...)
}

// run measures every row, repetition after repetition, so that drift in the host's
// load touches all rows of a repetition alike; ratios are taken within a repetition.
func (r *runner) run(ctx context.Context, rep *Report) error {
	r.pids = findServices(portOf(r.o.StompAddr, 61613), portOf(urlHost(r.o.AdminURL), 5432))
	if r.pids.Broker == 0 || r.pids.Postgres == 0 {
		r.logf("broker or database process not found on this host (pids %+v): their CPU columns stay 0", r.pids)
	}
	defer r.dropTemplate(ctx)
	if err := r.warmBroker(ctx); err != nil {
		return err
	}
	for i := 1; i <= r.o.Reps; i++ {
		for _, n := range r.o.Ns {
			// Generated per N and dropped after, to keep the parent small (see selfPeakRSS).
			corpus := Generate(Mix{N: n, DupRatio: r.o.Dup, MalformedRatio: r.o.Bad, Seed: uint64(n)})
			var ingestRate float64
			empty := map[string]*Measurement{} // the ingest and e2e-max rows, for journal-size
			var e2eMaxRate float64
			for _, row := range []string{rowBroker, rowNaive, rowIngest, rowIngestPrune, rowE2EMax, rowRiverIngest, rowRiver} {
				if !contains(r.o.Rows, row) {
					continue
				}
				configs := []Knobs{r.o.Knobs}
				if row == rowIngest {
					configs = r.o.ingestConfigs()
				}
				for _, k := range configs {
					sp := r.drainSpecOf(row, k)
					var shadow *Measurement
					if row == rowE2EMax && contains(r.o.Rows, rowShadow) {
						// The shadow row runs over what e2e-max has just processed, on its database.
						sp.after = func(ctx context.Context, db *freshDB, queue string, base Measurement) error {
							s, err := r.shadowRow(ctx, db, k, corpus, i, base, queue)
							shadow = &s
							return err
						}
					}
					m, err := r.drain(ctx, sp, k, corpus, i)
					if err != nil {
						return err
					}
					switch {
					case row == rowIngest && ingestRate == 0:
						ingestRate = m.MsgPerSec
					case row == rowE2EMax && ingestRate > 0:
						m.Note = fmt.Sprintf("%.2f× ingest (%.0f msg/s) in this repetition; %s", m.MsgPerSec/ingestRate, ingestRate, m.Note)
						r.logf("rep %d: e2e-max N=%d: %.2f× ingest", i, n, m.MsgPerSec/ingestRate)
					}
					switch {
					case row == rowE2EMax:
						e2eMaxRate = m.MsgPerSec
					case row == rowRiverIngest && ingestRate > 0 && m.MsgPerSec > 0:
						r.logf("rep %d: ingest N=%d: %.2f× river-ingest", i, n, ingestRate/m.MsgPerSec)
					case row == rowRiver && e2eMaxRate > 0 && m.MsgPerSec > 0:
						r.logf("rep %d: e2e-max N=%d: %.2f× river", i, n, e2eMaxRate/m.MsgPerSec)
					}
					if _, ok := empty[row]; !ok {
						empty[row] = &m
					}
					rep.Measurements = append(rep.Measurements, m)
					if shadow != nil {
						rep.Measurements = append(rep.Measurements, *shadow)
					}
				}
			}
			if contains(r.o.Rows, rowJournalSize) {
				for _, base := range []string{rowIngest, rowE2EMax} {
					m, err := r.journalSizeRow(ctx, base, r.o.Knobs, corpus, i, empty[base])
					if err != nil {
						return err
					}
					rep.Measurements = append(rep.Measurements, m)
				}
			}
		}
		if contains(r.o.Rows, rowBacklog) {
			ms, err := r.backlogRows(ctx, r.o.Knobs, i)
			rep.Measurements = append(rep.Measurements, ms...)
			if err != nil {
				return err
			}
		}
		var sweeper *Measurement // e2e-sweeper at -rate: replay-live's base
		for _, row := range []string{rowE2ESweeper, rowE2EWebhook, rowReplayLive} {
			if !contains(r.o.Rows, row) {
				continue
			}
			if !available[row] {
				r.logf("skipping %s: %v", row, errNotAvailable)
				continue
			}
			rates := []float64{r.o.Rate}
			if r.o.HighRate > 0 && row == rowE2ESweeper {
				rates = append(rates, r.o.HighRate) // the backlog check: p99 must stay flat
			}
			for _, rate := range rates {
				m, err := r.e2eRow(ctx, row, r.o.Knobs, i, rate)
				if err != nil {
					return err
				}
				switch {
				case row == rowE2ESweeper && rate == r.o.Rate:
					sweeper = &m
				case row == rowReplayLive && sweeper != nil && sweeper.Latency != nil && m.Latency != nil && sweeper.Latency.P99 > 0:
					m.VsBase, m.VsBaseWhat = m.Latency.P99/sweeper.Latency.P99, fmt.Sprintf("e2e-sweeper's at %.0f msg/s, without a replay", rate)
					m.Note = fmt.Sprintf("p99 %.2f× e2e-sweeper's in this repetition (%.0f ms at the same rate, without a replay); %s",
						m.VsBase, sweeper.Latency.P99, m.Note)
					r.logf("rep %d: replay-live: p99 %.2f× e2e-sweeper's (%.0f vs %.0f ms), replay at %.1f events/s (limit %.0f)",
						i, m.VsBase, m.Latency.P99, sweeper.Latency.P99, m.ReplayRate, m.ReplayLimit)
				}
				rep.Measurements = append(rep.Measurements, m)
			}
		}
	}
	return nil
}

// warmBroker runs BrokerWarmup messages through a scratch queue. ActiveMQ is a JVM:
// just started, its JIT compiler competes with every other process for the CPU for
// tens of seconds of traffic, and a row measured then shows it (on a broker restarted a
// moment before, the push path at 3,000 msg/s had a p99 of 610 ms, then 204 ms on the
// next repetition, and about 70 ms warm).
func (r *runner) warmBroker(ctx context.Context) error {
	if r.o.BrokerWarmup <= 0 {
		return nil
	}
	queue := fmt.Sprintf("inboxd.bench.warmup.%d", time.Now().UnixNano())
	body := []byte(`{"warmup":true}`)
	bodies := make([][]byte, r.o.BrokerWarmup)
	for i := range bodies {
		bodies[i] = body
	}
	start := time.Now()
	if err := publish(ctx, r.o.StompAddr, queue, bodies); err != nil {
		return fmt.Errorf("warming the broker: %w", err)
	}
	if _, _, err := drain(ctx, r.o.StompAddr, queue, r.o.Knobs.Prefetch, len(bodies), 30*time.Second); err != nil {
		return fmt.Errorf("warming the broker: %w", err)
	}
	r.logf("broker warmed with %d messages in %s", len(bodies), time.Since(start).Round(100*time.Millisecond))
	return nil
}

func (r *runner) profilePath(row string, k Knobs, n, rep int) string {
	if !r.o.CPUProfile {
		return ""
	}
	name := fmt.Sprintf("%s-n%d-rep%d-%s.pprof", row, n, rep, sqlName(k.label(row)))
	p, err := filepath.Abs(filepath.Join(r.o.Out, name))
	if err != nil {
		return filepath.Join(r.o.Out, name)
	}
	return p
}

// drainSpecOf is what the drain rows (1–3, e2e-max, river's) run with k: pre-publish the
// corpus to a fresh queue, let the child drain it, then check the database and that the
// queue is empty (drain).
func (r *runner) drainSpecOf(row string, k Knobs) drainSpec {
	config := k.label(row)
	if isRiverRow(row) {
		config = r.o.River.label(row, k)
	}
	return drainSpec{row: row, child: row, config: config}
}

// drainSpec says what a drain measurement runs: the child's row, on a fresh database or
// on a copy of template, reported as row.
type drainSpec struct {
	row, child, config string
	template           string
	// after, when set, runs once the measurement has passed its check, on its database
	// before it is dropped (the shadow row), with a context of its own row timeout.
	after func(ctx context.Context, db *freshDB, queue string, m Measurement) error
}

func (sp drainSpec) name() string {
	if sp.child == sp.row {
		return sp.row
	}
	return sp.row + "-" + sp.child
}

func (r *runner) drain(ctx context.Context, sp drainSpec, k Knobs, c Corpus, rep int) (Measurement, error) {
	n := len(c.Bodies)
	row := sp.row
	m := Measurement{Row: row, Config: sp.config, Knobs: k, N: n, Rep: rep}
	if !available[row] {
		return m, fmt.Errorf("row %s: %w", row, errNotAvailable)
	}
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, r.o.RowTimeout)
	defer cancel()
	queue := fmt.Sprintf("/queue/inboxd-bench.%s.%s", row, suffix())
	a := rowArgs{Row: sp.child, Queue: queue, N: n, StompAddr: r.o.StompAddr, Broker: r.o.Broker, Knobs: k, CPUProfile: r.profilePath(sp.name(), k, n, rep)}
	if isRiverRow(sp.child) {
		a.River = &r.o.River
	}
	m.Profile = a.CPUProfile
	var db *freshDB
	if row != rowBroker {
		var err error
		if sp.template != "" {
			db, err = createDBFrom(ctx, r.o.AdminURL, row, sp.template)
		} else {
			db, err = createDB(ctx, r.o.AdminURL, row)
		}
		if err != nil {
			return m, err
		}
		defer func() {
			if err := db.drop(ctx); err != nil {
				r.logf("%v", err)
			}
		}()
		a.DBURL = db.URL
	}
	t, host0, svc0 := time.Now(), hostCPU(), serviceCPU(r.pids)
	if err := publish(ctx, r.o.StompAddr, queue, c.Bodies); err != nil {
		return m, err
	}
	// What publishing cost, which the row's own figures leave out: beside a rate row,
	// whose figures include its publisher and the broker's work of taking each message.
	m.PublishHostCPUPer10k = (hostCPU() - host0).Seconds() / float64(n) * 1e4
	m.PublishBrokerCPUPer10k = (serviceCPU(r.pids)["broker"] - svc0["broker"]).Seconds() / float64(n) * 1e4
	r.logf("rep %d: %s N=%d [%s]: published in %.1fs (host %.2f, broker %.2f CPU s/10k), running", rep, row, n, m.Config,
		time.Since(t).Seconds(), m.PublishHostCPUPer10k, m.PublishBrokerCPUPer10k)
	stmtStats := db != nil && enableStatementStats(ctx, db.URL)
	wal0, walErr := r.walWritten(ctx, db)
	out, err := runChild(ctx, a, r.pids, nil)
	if err != nil {
		r.purge(ctx, queue)
		return m, err
	}
	m.fill(out, n)
	if wal1, err := r.walWritten(ctx, db); err == nil && walErr == nil {
		m.Note = wal1.since(wal0).per(n) + m.Note
	}
	if stmtStats {
		if t, err := readStatementTimes(ctx, db.URL); err == nil {
			m.Note = t.note(n) + m.Note
			r.logf("rep %d: %s: PostgreSQL's costliest statements:\n  %s", rep, row, strings.Join(t.top, "\n  "))
		} else {
			r.logf("%v", err)
		}
	}
	published := fmt.Sprintf("publishing them first: host %.2f, broker %.2f CPU s/10k", m.PublishHostCPUPer10k, m.PublishBrokerCPUPer10k)
	if m.Note != "" {
		published += "; "
	}
	m.Note = published + m.Note
	m.Check, m.OK = r.check(ctx, sp.child, queue, db, c, sp.template != "")
	r.logf("rep %d: %s N=%d: %.0f msg/s, %.2f CPU s/10k, peak RSS %.1f MiB (load %.2f, cal %.2f s), check %s %s",
		rep, row, n, m.MsgPerSec, m.CPUPer10k, float64(m.PeakRSSBytes)/(1<<20), m.Load, m.Calibration, m.Check, m.Note)
	if sp.after != nil && db != nil {
		if !m.OK {
			r.logf("rep %d: %s N=%d failed its check: the rows run on its database are skipped", rep, row, n)
			return m, nil
		}
		if err := sp.after(outer, db, queue, m); err != nil {
			return m, err
		}
	}
	return m, nil
}

// fill records a child's outcome over n messages.
func (m *Measurement) fill(out childOutcome, n int) {
	m.Note = out.Result.Note
	m.Load, m.Calibration = out.Conditions.Load, out.Conditions.Calibration
	m.DrainSeconds = out.Result.DrainSeconds
	m.WallSeconds = out.Wall.Seconds()
	if m.DrainSeconds > 0 {
		m.MsgPerSec = float64(n) / m.DrainSeconds
	}
	m.CPUSeconds = out.Usage.CPU().Seconds()
	m.CPUPer10k = m.CPUSeconds / float64(n) * 1e4
	m.HostCPUPer10k = out.HostCPU.Seconds() / float64(n) * 1e4
	m.BrokerCPUPer10k = out.ServiceCPU["broker"].Seconds() / float64(n) * 1e4
	m.DBCPUPer10k = out.ServiceCPU["database"].Seconds() / float64(n) * 1e4
	m.RusageMaxRSSBytes = out.Usage.MaxRSS
	m.PeakRSSBytes = out.Result.PeakRSS
	if m.PeakRSSBytes <= 0 {
		m.PeakRSSBytes = out.Usage.MaxRSS
	}
}

// check verifies a drain row exactly: the queue is empty (every message was acked),
// and for the database rows the journal holds exactly the unique valid ids and the
// quarantine exactly the malformed messages.
// On a pre-filled journal only the entries of this row's queue are checked.
func (r *runner) check(ctx context.Context, row, queue string, db *freshDB, c Corpus, prefilled bool) (string, bool) {
	left, _, err := drain(ctx, r.o.StompAddr, queue, 1000, 0, 500*time.Millisecond)
	if err != nil {
		return "draining leftovers: " + err.Error(), false
	}
	if left != 0 {
		return fmt.Sprintf("%d messages left unacked on the queue", left), false
	}
	if db == nil {
		return "ok", true
	}
	pool, err := openPool(ctx, db.URL, 1)
	if err != nil {
		return err.Error(), false
	}
	defer pool.Close()
	if isRiverRow(row) {
		return riverCheck(ctx, pool, row, c)
	}
	count, listIDs := journal.CountRows, journal.IDs
	if prefilled {
		count = func(ctx context.Context, db database.DB) (journal.Counts, error) {
			return journal.CountRowsTagged(ctx, db, queue)
		}
		listIDs = func(ctx context.Context, db database.DB) ([]string, error) {
			m, err := journal.IDsByTag(ctx, db, queue)
			ids := make([]string, 0, len(m))
			for id := range m {
				ids = append(ids, id)
			}
			return ids, err
		}
	}
	counts, err := count(ctx, pool)
	if err != nil {
		return err.Error(), false
	}
	if counts.Journal != len(c.IDs) || counts.Quarantine != c.Malformed {
		return fmt.Sprintf("journal=%d (want %d) quarantine=%d (want %d)", counts.Journal, len(c.IDs), counts.Quarantine, c.Malformed), false
	}
	if row == rowE2EMax && counts.ByStatus[journal.StatusProcessed] != counts.Journal {
		return fmt.Sprintf("journal by status %v, want all PROCESSED", counts.ByStatus), false
	}
	ids, err := listIDs(ctx, pool)
	if err != nil {
		return err.Error(), false
	}
	if diff := differentIDs(ids, c.IDs); diff != "" {
		return "journal ids differ from the published ones " + diff, false
	}
	return fmt.Sprintf("ok (journal=%d quarantine=%d)", counts.Journal, counts.Quarantine), true
}

// differentIDs says where got and want differ as sets of the same size ("" when they
// are equal); it sorts got.
func differentIDs(got, want []string) string {
	want = append([]string(nil), want...)
	sort.Strings(want)
	sort.Strings(got)
	for i := range want {
		if got[i] != want[i] {
			return fmt.Sprintf("(first: %s vs %s)", got[i], want[i])
		}
	}
	return ""
}

// purge empties a queue a failed row left behind, so it does not fill the broker.
func (r *runner) purge(ctx context.Context, queue string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if n, _, err := drain(ctx, r.o.StompAddr, queue, 1000, 0, time.Second); err != nil {
		r.logf("purging %s: %v", queue, err)
	} else if n > 0 {
		r.logf("purged %d messages from %s", n, queue)
	}
}

// e2eRow measures row 4: the child runs ingest and processing; the parent publishes a
// warm-up, then -rate messages per second for -e2e-duration, waits until all are
// PROCESSED and reads the latencies from the journal.
func (r *runner) e2eRow(ctx context.Context, row string, k Knobs, rep int, rate float64) (Measurement, error) {
	total := int(rate * r.o.E2EDuration.Seconds())
	m := Measurement{Row: row, Config: fmt.Sprintf("%s rate=%.0f", k.label(row), rate), Knobs: k, N: total, Rep: rep, OfferedRate: rate}
	var hist *replayHistory // replay-live: the processed events a replay runs over meanwhile
	if row == rowReplayLive {
		hist = &replayHistory{events: r.o.replayEvents(), aggregates: r.o.ReplayAggregates, rate: r.o.ReplayRate}
		m.Config += fmt.Sprintf("; replaying %d events of %d other aggregates at ≤ %.0f/s", hist.events, hist.aggregates, hist.rate)
		m.ReplayLimit = hist.rate
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.RowTimeout)
	defer cancel()
	queue := fmt.Sprintf("/queue/inboxd-bench.%s.%s", row, suffix())
	db, pool, done, err := r.scratchDB(ctx, row)
	if err != nil {
		return m, err
	}
	defer done()
	a := rowArgs{Row: row, Queue: queue, DBURL: db.URL, StompAddr: r.o.StompAddr, Broker: r.o.Broker, Knobs: k, CPUProfile: r.profilePath(row, k, total, rep)}
	m.Profile = a.CPUProfile

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(rep)))
	var measureFrom time.Time
	registered := time.Now().UTC()
	history := 0 // events processed before the warm-up
	var replayed0, replayed1, replayLeft int64
	var replayedFor time.Duration
	during := func(ctx context.Context) error {
		if hist != nil {
			if err := r.startHistoryReplay(ctx, hist, queue, pool, rng, registered); err != nil {
				return err
			}
			history = hist.events
		}
		conn, err := dial(ctx, r.o.StompAddr)
		if err != nil {
			return err
		}
		defer conn.Disconnect()
		next := 0
		phase := func(n int, within time.Duration) error {
			if err := publishPaced(ctx, conn, queue, n, rate, func(_ int, sentAt time.Time) []byte {
				next++
				return registrationBody(message.SeededID(rng), next, registered, sentAt)
			}); err != nil {
				return err
			}
			return waitProcessed(ctx, pool, history+next, within)
		}
		if r.o.Warmup > 0 {
			if err := phase(r.o.Warmup, time.Minute); err != nil {
				return fmt.Errorf("warm-up: %w", err)
			}
		}
		if hist != nil {
			if replayed0, _, err = replayProgress(ctx, pool, hist.run); err != nil {
				return err
			}
		}
		measureFrom = time.Now()
		if err := phase(total, 2*time.Minute); err != nil {
			return err
		}
		if hist != nil {
			replayedFor = time.Since(measureFrom)
			if replayed1, replayLeft, err = replayProgress(ctx, pool, hist.run); err != nil {
				return err
			}
		}
		return nil
	}
	r.logf("rep %d: %s: offering %.0f msg/s for %s", rep, row, rate, r.o.E2EDuration)
	commits0, _ := transactions(ctx, pool)
	wal0, walErr := r.walWritten(ctx, pool)
	out, err := runChild(ctx, a, r.pids, during)
	if err != nil {
		r.purge(ctx, queue)
		return m, err
	}
	m.fill(out, total+r.o.Warmup) // the history's events, processed before, are the replay's
	commits1, cerr := transactions(ctx, pool)
	wal1, walErr1 := r.walWritten(ctx, pool)
	timings, err := journal.ProcessedTimings(ctx, pool)
	if err != nil {
		return m, err
	}
	var e2e, ing, firstHalf, secondHalf []time.Duration
	var last time.Time
	half := measureFrom.Add(r.o.E2EDuration / 2)
	for _, t := range timings {
		sent, err := time.Parse(time.RFC3339Nano, t.SentAt)
		if err != nil {
			return m, fmt.Errorf("bad sentAt %q: %w", t.SentAt, err)
		}
		if sent.Before(measureFrom) {
			continue // warm-up
		}
		e2e = append(e2e, t.ProcessedAt.Sub(sent))
		if sent.Before(half) {
			firstHalf = append(firstHalf, t.ProcessedAt.Sub(sent))
		} else {
			secondHalf = append(secondHalf, t.ProcessedAt.Sub(sent))
		}
		ing = append(ing, t.ReceivedAt.Sub(sent))
		if t.ProcessedAt.After(last) {
			last = t.ProcessedAt
		}
	}
	lat, ingLat := summarize(e2e), summarize(ing)
	// A growing backlog shows as a second half slower than the first.
	m.Note = fmt.Sprintf("p99 first/second half %.0f/%.0f ms; %s", summarize(firstHalf).P99, summarize(secondHalf).P99, m.Note)
	if cerr == nil {
		// Per event, what a moderate rate costs most in (issue 29): the transactions of
		// ingest, processing and the workers' empty claims, and the parent's few reads.
		m.Note = fmt.Sprintf("%.2f transactions per event; %s", float64(commits1-commits0)/float64(total+r.o.Warmup), m.Note)
	}
	if walErr == nil && walErr1 == nil {
		m.Note = wal1.since(wal0).per(total+r.o.Warmup) + m.Note
	}
	// The publisher runs in this process: one persistent send a millisecond, each with
	// its receipt, which the pre-published e2e-max row does not pay for. What is left
	// of the host's CPU without it is what serving the rate costs.
	perMsg := 1e4 / float64(total+r.o.Warmup)
	m.Note = fmt.Sprintf("load generator %.2f CPU s/10k, host less it %.2f; %s", out.SelfCPU.Seconds()*perMsg,
		(out.HostCPU-out.SelfCPU).Seconds()*perMsg, m.Note)
	m.Latency, m.IngestLatency = &lat, &ingLat
	// Throughput of the measured phase: messages over first send → last processed.
	m.DrainSeconds = last.Sub(measureFrom).Seconds()
	if m.DrainSeconds > 0 {
		m.MsgPerSec = float64(len(e2e)) / m.DrainSeconds
	}
	if hist != nil && replayedFor > 0 {
		m.ReplayRate = float64(replayed1-replayed0) / replayedFor.Seconds()
		m.Note = fmt.Sprintf("replay run: %d events replayed while the rate was measured (%.1f/s, limit %.0f), %d left after; %s",
			replayed1-replayed0, m.ReplayRate, hist.rate, replayLeft, m.Note)
	}
	counts, err := journal.CountRows(ctx, pool)
	switch {
	case err != nil:
		m.Check = err.Error()
	case len(e2e) != total || counts.Journal != total+r.o.Warmup+history || counts.ByStatus[journal.StatusProcessed] != counts.Journal:
		m.Check = fmt.Sprintf("measured %d of %d, journal %v", len(e2e), total, counts.ByStatus)
	case hist != nil && replayLeft == 0:
		m.Check = fmt.Sprintf("the replay ended before the measured phase did: raise -replay-events (%d)", hist.events)
	default:
		m.Check, m.OK = fmt.Sprintf("ok (processed=%d)", counts.Journal), true
		if hist != nil {
			m.Check = fmt.Sprintf("ok (processed=%d: %d live, %d under replay throughout)", counts.Journal, total+r.o.Warmup, hist.events)
		}
	}
	r.logf("rep %d: %s: %.0f msg/s, latency p50/p95/p99 %.0f/%.0f/%.0f ms (journaled: %.0f/%.0f/%.0f), %.2f CPU s/10k, host %.2f, peak RSS %.1f MiB (load %.2f, cal %.2f s), check %s; %s",
		rep, row, m.MsgPerSec, lat.P50, lat.P95, lat.P99, ingLat.P50, ingLat.P95, ingLat.P99, m.CPUPer10k, m.HostCPUPer10k, float64(m.PeakRSSBytes)/(1<<20), m.Load, m.Calibration, m.Check, m.Note)
	return m, nil
}

// walCount is what the database server has written to its WAL so far (pg_stat_wal,
// PostgreSQL 14+): the whole cluster's, which is the row's alone, as the rows run one
// at a time. Like transactions per event, it does not depend on the machine's speed.
// https://www.postgresql.org/docs/15/monitoring-stats.html#MONITORING-PG-STAT-WAL-VIEW
type walCount struct{ records, bytes int64 }

func (w walCount) since(o walCount) walCount {
	return walCount{records: w.records - o.records, bytes: w.bytes - o.bytes}
}

// per is the note of a row's WAL over n messages.
func (w walCount) per(n int) string {
	n = max(n, 1)
	return fmt.Sprintf("WAL %.1f records, %.0f bytes per message; ", float64(w.records)/float64(n), float64(w.bytes)/float64(n))
}

// walWritten reads walCount through db, or through the admin URL when db is a *freshDB
// (or nil: the broker row, which writes none).
func (r *runner) walWritten(ctx context.Context, db any) (walCount, error) {
	var w walCount
	q, ok := db.(database.DB)
	if !ok {
		if f, isFresh := db.(*freshDB); !isFresh || f == nil {
			return w, errors.New("no database")
		}
		pool, err := openPool(ctx, r.o.AdminURL, 1)
		if err != nil {
			return w, err
		}
		defer pool.Close()
		q = pool
	}
	err := q.QueryRow(ctx, `SELECT wal_records, wal_bytes::INT8 FROM pg_stat_wal`).Scan(&w.records, &w.bytes)
	return w, err
}

// transactions is how many transactions the database of db has committed and rolled
// back. The child's backends report theirs when they exit (PostgreSQL 15's cumulative
// statistics), so a count read after the child is gone holds all of them.
func transactions(ctx context.Context, db database.DB) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// waitProcessed polls until want journal rows are PROCESSED. It polls only after the
// publisher is done, every 100 ms, to stay out of the measured work's way.
func waitProcessed(ctx context.Context, db database.DB, want int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		n, err := journal.CountByStatus(ctx, db, journal.StatusProcessed)
		if err != nil {
			return err
		}
		if n >= int64(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events PROCESSED after %s", n, want, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// portOf is the port of host:port, or def.
func portOf(hostport string, def int) int {
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		return def
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return def
	}
	return n
}

// urlHost is the host:port of a URL, or "" when it has none.
func urlHost(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}
