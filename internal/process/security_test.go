package process_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/inboxd/inboxd/internal/metrics"
	"github.com/inboxd/inboxd/internal/process"
	pt "github.com/inboxd/inboxd/internal/process/processtest"
	"github.com/inboxd/inboxd/internal/testenv"
)

// Issue 10: 2,000 messages with distinct type values grew /metrics to 10 MB and 37,402
// series, the type being a label; and rejections logged their reason (an e-mail) at INFO.
func TestMetricLabelsAndLogsAreBounded(t *testing.T) {
	t.Parallel()
	db := testenv.NewDB(t)
	fx := pt.NewEffects(t, db.Pool)
	reg := process.NewRegistry()
	reg.Register(pt.EffectType, fx)
	m := metrics.New()
	var logs bytes.Buffer
	e := process.New(db.Pool, reg, process.Config{MaxAttempts: 1}, m, slog.New(slog.NewTextHandler(&logs, nil)))

	var payloads [][]byte
	for i := range 200 {
		payloads = append(payloads, pt.Payload(pt.Spec{Type: fmt.Sprintf("made-up-%d", i)}))
	}
	payloads = append(payloads, pt.Payload(pt.Spec{Reject: true}))
	for _, id := range pt.Ingest(t, db.Pool, payloads...) {
		// A batch that keeps conflicting (40001, under the profile's SERIALIZABLE) ends
		// in an error, and the sweeper or the feed tries it again later: so does this.
		// Nothing else writes this database: its conflicts come from SSI's bookkeeping,
		// which every test's database shares (PostgreSQL summarizes old serializable
		// transactions once it keeps many, and then reports conflicts with them).
		for try := 1; ; try++ {
			_, err := e.Process(context.Background(), id)
			var pgErr *pgconn.PgError
			if err == nil || try == 5 || !errors.As(err, &pgErr) || pgErr.Code != "40001" {
				if err != nil {
					t.Fatal(err)
				}
				break
			}
		}
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "inboxd_process_") {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "event_type" && l.GetValue() != pt.EffectType && l.GetValue() != process.OtherType {
					t.Fatalf("%s has event_type %q: labels must be registered types or %q", mf.GetName(), l.GetValue(), process.OtherType)
				}
			}
		}
	}
	// Failures stay at WARN/ERROR with their cause; INFO carries no payload values.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "level=INFO") && (strings.Contains(line, "made-up-") || strings.Contains(line, "simulated rejection")) {
			t.Errorf("payload values at INFO: %s", line)
		}
	}
}
