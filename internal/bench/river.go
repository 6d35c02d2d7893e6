package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The River rows (issue 29): the same inbox built with River v0.51.2 as River's docs
// build one, run by a binary of its own (internal/riverbench, its own module, so that
// the library's go.mod does not name River). The parent measures and checks them as
// it does inboxd's rows; only the child differs.
const (
	// rowRiverIngest is the ingest row's counterpart: the STOMP consumer inserting one
	// unique job per event (InsertManyTx, UniqueOpts{ByArgs: true}) per batch.
	rowRiverIngest = "river-ingest"
	// rowRiver is e2e-max's: the consumer and River's workers together, each job's
	// effect written and the job completed (JobCompleteTx) in one transaction.
	rowRiver = "river"
)

var riverRows = []string{rowRiverIngest, rowRiver}

func isRiverRow(row string) bool { return contains(riverRows, row) }

// riverSettings are River's: its best of the settings issue 29 tried (200 workers,
// 10 ms fetch cooldown), and a pool large enough for them.
type riverSettings struct {
	Bin           string        `json:"bin"`
	Workers       int           `json:"workers"`
	FetchCooldown time.Duration `json:"fetch_cooldown"`
	PoolSize      int           `json:"pool_size"`
}

func (s *riverSettings) register(fs *flag.FlagSet) {
	fs.StringVar(&s.Bin, "river-bin", "", "river rows: the inboxd-river binary (default: inboxd-river beside this one; make build builds it)")
	fs.IntVar(&s.Workers, "river-workers", 200, "river row: MaxWorkers of River's queue")
	fs.DurationVar(&s.FetchCooldown, "river-fetch-cooldown", 10*time.Millisecond, "river row: River's FetchCooldown")
	fs.IntVar(&s.PoolSize, "river-pool-size", 40, "river row: database connections of River's client and workers")
}

// resolve defaults Bin to inboxd-river beside this executable.
func (s *riverSettings) resolve() error {
	if s.Workers < 1 || s.PoolSize < 1 || s.FetchCooldown <= 0 {
		return errors.New("-river-workers and -river-pool-size must be at least 1, -river-fetch-cooldown positive")
	}
	if s.Bin != "" {
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this executable: %w", err)
	}
	s.Bin = filepath.Join(filepath.Dir(exe), "inboxd-river")
	return nil
}

func (s riverSettings) found() bool {
	st, err := os.Stat(s.Bin)
	return err == nil && !st.IsDir()
}

// riverLabel is a river row's configuration.
func (s riverSettings) label(row string, k Knobs) string {
	if row == rowRiverIngest {
		return fmt.Sprintf("InsertManyTx unique ByArgs, batch=%d linger=%s ack=client prefetch=%d pool=%d", k.BatchSize, k.Linger, k.Prefetch, k.PoolSize)
	}
	return fmt.Sprintf("pre-published; batch=%d workers=%d fetch-cooldown=%s pool=%d, JobCompleteTx", k.BatchSize, s.Workers, s.FetchCooldown, s.PoolSize)
}

// command is the program and arguments that run a for the parent: inboxd's own
// "bench-row" or, for a river row, the inboxd-river binary.
func (a rowArgs) command() (string, []string, error) {
	if a.River == nil {
		exe, prefix, err := reexec()
		return exe, append(prefix, a.args()...), err
	}
	s := *a.River
	pool := a.Knobs.PoolSize
	if a.Row == rowRiver {
		pool = s.PoolSize
	}
	return s.Bin, []string{"-row=" + a.Row, "-queue=" + a.Queue, "-n=" + strconv.Itoa(a.N),
		"-db-url=" + a.DBURL, "-stomp-addr=" + a.StompAddr, "-cpuprofile=" + a.CPUProfile,
		"-batch-size=" + strconv.Itoa(a.Knobs.BatchSize), "-linger=" + a.Knobs.Linger.String(),
		"-prefetch=" + strconv.Itoa(a.Knobs.Prefetch), "-pool-size=" + strconv.Itoa(pool),
		"-workers=" + strconv.Itoa(s.Workers), "-fetch-cooldown=" + s.FetchCooldown.String()}, nil
}

// riverCheck verifies a river row as check verifies inboxd's: River's jobs are exactly
// the unique valid ids, one each; the consumer's table of malformed messages holds
// exactly the malformed ones; and for the river row every job is completed and every
// customer written once (the effect; inboxd's e2e-max checks PROCESSED).
func riverCheck(ctx context.Context, pool *pgxpool.Pool, row string, c Corpus) (string, bool) {
	var jobs, distinct, bad, done, customers int
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM river_job),
		(SELECT count(DISTINCT args->>'id') FROM river_job),
		(SELECT count(*) FROM river_inbox_rejected),
		(SELECT count(*) FROM river_job WHERE state = 'completed'),
		(SELECT count(*) FROM customers)`).Scan(&jobs, &distinct, &bad, &done, &customers); err != nil {
		return err.Error(), false
	}
	if jobs != len(c.IDs) || distinct != jobs || bad != c.Malformed {
		return fmt.Sprintf("jobs=%d (%d distinct ids; want %d) rejected=%d (want %d)", jobs, distinct, len(c.IDs), bad, c.Malformed), false
	}
	if row == rowRiver && (done != jobs || customers != jobs) {
		return fmt.Sprintf("jobs=%d completed=%d customers=%d, want all", jobs, done, customers), false
	}
	rows, err := pool.Query(ctx, `SELECT args->>'id' FROM river_job`)
	if err != nil {
		return err.Error(), false
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return err.Error(), false
		}
		ids = append(ids, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err.Error(), false
	}
	if diff := differentIDs(ids, c.IDs); diff != "" {
		return "job ids differ from the published ones " + diff, false
	}
	if row == rowRiver {
		return fmt.Sprintf("ok (jobs=%d completed, customers=%d, rejected=%d)", jobs, customers, bad), true
	}
	return fmt.Sprintf("ok (jobs=%d rejected=%d)", jobs, bad), true
}
