package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/inboxd/inboxd/internal/database"
	"github.com/inboxd/inboxd/internal/testenv"
)

// planNode is the part of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType   string     `json:"Node Type"`
	Relation   string     `json:"Relation Name"`
	Index      string     `json:"Index Name"`
	ActualRows float64    `json:"Actual Rows"`
	Removed    float64    `json:"Rows Removed by Filter"`
	Loops      float64    `json:"Actual Loops"`
	Plans      []planNode `json:"Plans"`
}

// reads adds every node that reads the outbox, as "outbox/index" (or "outbox/Seq Scan",
// "outbox/Bitmap Heap Scan") → rows read, those a filter removed included.
func (n planNode) reads(out map[string]float64) {
	key := ""
	switch {
	case n.NodeType == "ModifyTable":
	case n.Index != "":
		key = "outbox/" + n.Index
	case n.Relation != "":
		key = n.Relation + "/" + n.NodeType
	}
	if key != "" {
		out[key] += (n.ActualRows + n.Removed) * max(n.Loops, 1)
	}
	for _, c := range n.Plans {
		c.reads(out)
	}
}

func explainAnalyze(t *testing.T, q database.DB, sql string, args ...any) map[string]float64 {
	t.Helper()
	var out []byte
	if err := q.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out); err != nil {
		t.Fatal(err)
	}
	var p []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(out, &p); err != nil || len(p) != 1 {
		t.Fatalf("parsing EXPLAIN: %v (%s)", err, out)
	}
	read := map[string]float64{}
	p[0].Plan.reads(read)
	return read
}

// The claim's statements go through their indexes and read about what they return, not
// the whole outbox: picking 100 heads among 5,000 unsent rows of 2,000 groups reads the
// unsent index in lease order and probes outbox_group_order per row; locking and leasing
// go by primary key and by group.
func TestClaimPlansUseIndexes(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	ctx := context.Background()
	const groups = 2000
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var msgs []Outgoing
		for g := range groups {
			for n := 1; n <= 3; n++ {
				msgs = append(msgs, groupMsg("/queue/x", fmt.Sprintf("g%04d", g), n))
			}
		}
		_, err := EmitBatch(ctx, tx, msgs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// 1,000 of them sent, and 100,000 sent before (an outbox keeps sent rows for a day):
	// the partial indexes matter.
	if _, err := db.Pool.Exec(ctx, `UPDATE outbox SET sent_at = now() WHERE id IN (SELECT id FROM outbox ORDER BY seq LIMIT 1000)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, destination, body, grp, sent_at)
		SELECT gen_random_uuid(), '/queue/x', '', 'old' || (i % 5000), now() FROM generate_series(1, 100000) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE outbox`); err != nil {
		t.Fatal(err)
	}
	check := func(what string, read map[string]float64, allowed []string, maxRows float64) {
		t.Helper()
		for k, rows := range read {
			ok := false
			for _, a := range allowed {
				ok = ok || strings.HasPrefix(k, a)
			}
			if !ok {
				t.Errorf("%s reads %s (%v rows); want only %v", what, k, rows, allowed)
			}
			if rows > maxRows {
				t.Errorf("%s reads %v rows of %s; want at most %v", what, rows, k, maxRows)
			}
		}
		if len(read) == 0 {
			t.Errorf("%s reads no table", what)
		}
		t.Logf("%s reads %v", what, read)
	}
	check("pick", explainAnalyze(t, db.Pool, sqlPickHeads, 100),
		[]string{"outbox/outbox_unsent", "outbox/outbox_group_order"}, 1000)

	var ids []string
	rows, err := db.Pool.Query(ctx, sqlPickHeads, 100)
	if err != nil {
		t.Fatal(err)
	}
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(ids) != 100 {
		t.Fatalf("picked %d heads, %v; want 100", len(ids), err)
	}
	check("lock", explainAnalyze(t, db.Pool, sqlLockHeads, ids), []string{"outbox/outbox_pkey", "outbox/Bitmap Heap Scan"}, 100)

	var hid []string
	var hgrp []*string
	var hseq []int64
	var id string
	var grp *string
	var seq int64
	var due bool
	lock, err := db.Pool.Query(ctx, sqlLockHeads, ids)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pgx.ForEachRow(lock, []any{&id, &grp, &seq, &due}, func() error {
		hid, hgrp, hseq = append(hid, id), append(hgrp, grp), append(hseq, seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// EXPLAIN ANALYZE runs the UPDATE: in a transaction rolled back afterwards.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	check("lease", explainAnalyze(t, tx, sqlLeaseClaim, hid, hgrp, hseq, 100, 30000),
		[]string{"outbox/outbox_pkey", "outbox/outbox_group_order", "outbox/outbox_unsent", "outbox/Bitmap Heap Scan"}, 1000)
}
