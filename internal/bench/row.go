package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/go-stomp/stomp/v3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
)

const (
	rowBroker = "broker"
	rowNaive  = "naive"
	rowIngest = "ingest"
	// rowIngestPrune is the ingest row with the PostgreSQL retention pruner deleting a
	// backlog of expired entries the whole time (issue 9: pruning must not slow ingest).
	rowIngestPrune = "ingest+prune"
	rowE2ESweeper  = "e2e-sweeper"
	rowE2EWebhook  = "e2e-webhook"
	rowE2EMax      = "e2e-max"
	// rowShadow is a shadow replay (internal/replay) over the events the e2e-max row has
	// just processed, on its database: events per second, against e2e-max's.
	rowShadow = "shadow"
	// rowReplayLive is e2e-sweeper at -rate while a replay run reprocesses a processed
	// history at -replay-rate: its p99, against e2e-sweeper's without a replay.
	rowReplayLive = "replay-live"
)

// rowArgs is what the parent tells a child.
type rowArgs struct {
	Row        string
	Queue      string
	N          int // messages to drain (drain rows)
	DBURL      string
	StompAddr  string
	Broker     string // activemq or rabbitmq (setBroker)
	CPUProfile string
	Knobs      Knobs
	// River, for a river row, runs it in the inboxd-river binary (river.go).
	River *riverSettings
}

// rowResult is the child's report, one JSON line after "result ".
type rowResult struct {
	Received     int     `json:"received"`
	DrainSeconds float64 `json:"drain_seconds"`  // subscription → last message done
	PeakRSS      int64   `json:"peak_rss_bytes"` // VmHWM at the end (see selfPeakRSS)
	Note         string  `json:"note,omitempty"`
	// Differing is, for the shadow row, the events whose shadow run differed from what
	// was recorded (the unchanged handler: none).
	Differing int `json:"differing,omitempty"`
}

// Lines the child writes on stdout.
const (
	lineReady  = "ready"
	lineResult = "result "
)

func (a rowArgs) args() []string {
	out := []string{"-row=" + a.Row, "-queue=" + a.Queue, "-n=" + strconv.Itoa(a.N),
		"-db-url=" + a.DBURL, "-stomp-addr=" + a.StompAddr, "-broker=" + a.Broker, "-cpuprofile=" + a.CPUProfile}
	return append(out, a.Knobs.args()...)
}

// RowMain runs one benchmark row in this process; the parent (Main) re-executes the
// binary as "inboxd bench-row …" to call it. It is not meant to be run by hand.
//
// Drain rows write "result {json}" once every message is done and return. The
// end-to-end rows write "ready" once running and "result {json}" after their stdin
// closes, which is how the parent stops them.
func RowMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("inboxd bench-row", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := rowArgs{Knobs: defaultKnobs()}
	fs.StringVar(&a.Row, "row", "", "broker, naive, ingest, ingest+prune, e2e-max, backlog, shadow, e2e-sweeper, e2e-webhook or replay-live")
	fs.StringVar(&a.Queue, "queue", "", "STOMP destination")
	fs.IntVar(&a.N, "n", 0, "messages to drain (shadow: events to run, at most)")
	fs.StringVar(&a.DBURL, "db-url", "", "database of the row")
	fs.StringVar(&a.StompAddr, "stomp-addr", "127.0.0.1:61613", "STOMP address")
	fs.StringVar(&a.Broker, "broker", "activemq", "activemq or rabbitmq")
	fs.StringVar(&a.CPUProfile, "cpuprofile", "", "write a CPU profile of the row to this file")
	a.Knobs.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	tracedPublish.Store(a.Knobs.Tracing) // this process may publish (bench/tracing.go)
	if err := setBroker(a.Broker); err != nil {
		return err
	}
	if err := a.Knobs.validate(); err != nil {
		return err
	}
	if a.Queue == "" {
		return errors.New("-queue is required")
	}
	stopProfile, err := StartCPUProfile(a.CPUProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	// The parent closing our stdin (or dying) ends the row.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ready := func() { fmt.Fprintln(stdout, lineReady) }

	var res rowResult
	switch a.Row {
	case rowBroker, rowNaive, rowIngest, rowIngestPrune, rowE2EMax, rowBacklog, rowShadow:
		go func() {
			select {
			case <-stdinClosed:
				cancel()
			case <-ctx.Done():
			}
		}()
		switch a.Row {
		case rowBroker:
			var d time.Duration
			res.Received, d, err = drain(ctx, a.StompAddr, a.Queue, a.Knobs.Prefetch, a.N, 30*time.Second)
			res.DrainSeconds = d.Seconds()
		case rowNaive:
			res, err = runNaive(ctx, a)
		case rowIngest:
			res, err = runIngest(ctx, a, log)
		case rowIngestPrune:
			res, err = runIngestPruning(ctx, a, log)
		case rowE2EMax, rowBacklog:
			res, err = runE2EMax(ctx, a, log)
		case rowShadow:
			res, err = runShadow(ctx, a, log)
		}
	case rowE2ESweeper, rowE2EWebhook, rowReplayLive:
		res, err = runE2E(ctx, a, log, ready, stdinClosed)
	default:
		return fmt.Errorf("unknown row %q", a.Row)
	}
	if err != nil {
		return err
	}
	res.PeakRSS = selfPeakRSS()
	b, _ := json.Marshal(res)
	fmt.Fprintf(stdout, "%s%s\n", lineResult, b)
	return nil
}

// StartCPUProfile writes a CPU profile of this process to path until stop is called
// (path "": none).
func StartCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting cpu profile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// runNaive is row 2: per message, one INSERT … ON CONFLICT DO NOTHING transaction (or
// one quarantine insert), then an individual ack.
func runNaive(ctx context.Context, a rowArgs) (rowResult, error) {
	pool, err := openPool(ctx, a.DBURL, a.Knobs.PoolSize)
	if err != nil {
		return rowResult{}, err
	}
	defer pool.Close()
	start := time.Now()
	n, err := naiveConsume(ctx, a, pool, a.N)
	return rowResult{Received: n, DrainSeconds: time.Since(start).Seconds()}, err
}

// naiveConsume consumes a.Queue the naive way until want messages are done (want 0:
// until ctx ends, which is then not an error).
func naiveConsume(ctx context.Context, a rowArgs, pool *pgxpool.Pool, want int) (int, error) {
	conn, err := dial(ctx, a.StompAddr)
	if err != nil {
		return 0, err
	}
	defer conn.Disconnect()
	sub, err := conn.Subscribe(a.Queue, stomp.AckClientIndividual, prefetch(a.Knobs.Prefetch)...)
	if err != nil {
		return 0, fmt.Errorf("subscribing to %s: %w", a.Queue, err)
	}
	n := 0
	for want == 0 || n < want {
		var m *stomp.Message
		select {
		case <-ctx.Done():
			if want == 0 {
				return n, nil
			}
			return n, ctx.Err()
		case m = <-sub.C:
		}
		if m == nil || m.Err != nil {
			return n, fmt.Errorf("reading %s: subscription ended: %v", a.Queue, m)
		}
		ev, err := message.Decode(m.Body, m.Header.Get, message.Options{DefaultEventType: "registration"})
		if err != nil {
			var inv *message.Invalid
			if !errors.As(err, &inv) {
				return n, err
			}
			_, err = journal.Ingest(ctx, pool, journal.Batch{Bad: []journal.Bad{{
				Reason: inv.Reason, Detail: inv.Detail, Destination: a.Queue,
				MessageID: m.Header.Get("message-id"), Body: m.Body,
			}}})
		} else {
			_, err = journal.InsertOne(ctx, pool, journal.Entry{Event: ev, Destination: a.Queue})
		}
		if err != nil {
			if want == 0 && ctx.Err() != nil {
				return n, nil
			}
			return n, err
		}
		if err := conn.Ack(m); err != nil {
			return n, fmt.Errorf("acking: %w", err)
		}
		n++
	}
	return n, nil
}

func openPool(ctx context.Context, url string, size int) (*pgxpool.Pool, error) {
	return openTracedPool(ctx, url, size, nil)
}

// openTracedPool is openPool with tracer (nil: none) on every connection.
func openTracedPool(ctx context.Context, url string, size int, tracer pgx.QueryTracer) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing database url: %w", err)
	}
	cfg.MaxConns = int32(size)
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	return pool, nil
}
