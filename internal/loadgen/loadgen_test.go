package loadgen

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/inboxd/inboxd/internal/journal"
	"github.com/inboxd/inboxd/internal/message"
	"github.com/inboxd/inboxd/internal/stompx"
	"github.com/inboxd/inboxd/internal/testenv"
)

func TestPlan(t *testing.T) {
	tests := []struct {
		name          string
		cfg           Config
		ids, dup, mal int
	}{
		{"mix", Config{Messages: 1000, DuplicateRatio: 0.3, MalformedRatio: 0.01}, 690, 300, 10},
		{"all valid", Config{Messages: 50}, 50, 0, 0},
		{"only duplicates keeps one original", Config{Messages: 10, DuplicateRatio: 1}, 1, 9, 0},
		{"empty", Config{}, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Destination, tt.cfg.Seed, tt.cfg.MaxBodyBytes = "/queue/x", 3, 2048
			bodies, exp, err := Plan(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(exp.IDs) != tt.ids || exp.Duplicates != tt.dup || exp.MalformedCount() != tt.mal || len(bodies) != tt.cfg.Messages {
				t.Fatalf("ids %d dup %d mal %d bodies %d; want %d %d %d %d",
					len(exp.IDs), exp.Duplicates, exp.MalformedCount(), len(bodies), tt.ids, tt.dup, tt.mal, tt.cfg.Messages)
			}
			// Decoding the plan as ingest would gives back exactly the expectation.
			valid := map[string]int{}
			var quarantine []string
			for _, b := range bodies {
				ev, err := message.Decode(b, func(string) string { return "" }, message.Options{MaxBodyBytes: tt.cfg.MaxBodyBytes})
				if inv, ok := errors.AsType[*message.Invalid](err); ok {
					quarantine = append(quarantine, message.QuarantineID(inv.Reason, tt.cfg.Destination, b))
					continue
				}
				valid[ev.ID]++
			}
			if len(valid) != len(exp.IDs) {
				t.Errorf("distinct valid ids = %d, want %d", len(valid), len(exp.IDs))
			}
			for _, id := range exp.IDs {
				if valid[id] == 0 {
					t.Errorf("expected id %s not in the plan", id)
				}
			}
			slices.Sort(quarantine)
			want := slices.Sorted(slices.Values(exp.QuarantineIDs))
			if !slices.Equal(quarantine, want) {
				t.Errorf("quarantine ids of the plan differ from the expectation")
			}
			if tt.mal > 0 && len(exp.Malformed) != 4 {
				t.Errorf("malformed kinds = %v, want all four", exp.Malformed)
			}
			again, exp2, _ := Plan(tt.cfg)
			if !slices.EqualFunc(bodies, again, func(a, b []byte) bool { return string(a) == string(b) }) || !slices.Equal(exp.IDs, exp2.IDs) {
				t.Error("same seed gave another plan")
			}
		})
	}
	if _, _, err := Plan(Config{Destination: "/queue/x", Messages: 10, DuplicateRatio: 0.8, MalformedRatio: 0.5}); err == nil {
		t.Error("ratios above 1 accepted")
	}
}

func TestVerify(t *testing.T) {
	db := testenv.NewDB(t)
	cfg := Config{Destination: "/queue/verify", Messages: 60, DuplicateRatio: 0.2, MalformedRatio: 0.1, Seed: 5, MaxBodyBytes: 1024}
	bodies, exp, err := Plan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := Verify(ctx, db.Pool, exp); err == nil || !strings.Contains(err.Error(), "lacks") {
		t.Fatalf("Verify on an empty database = %v, want missing rows", err)
	}
	var b journal.Batch
	for _, body := range bodies {
		ev, err := message.Decode(body, func(string) string { return "" }, message.Options{MaxBodyBytes: cfg.MaxBodyBytes})
		if inv, ok := errors.AsType[*message.Invalid](err); ok {
			b.Bad = append(b.Bad, journal.Bad{Reason: inv.Reason, Detail: inv.Detail, Destination: cfg.Destination, Body: body})
			continue
		}
		b.Entries = append(b.Entries, journal.Entry{Event: ev, Destination: cfg.Destination})
	}
	if _, err := journal.Ingest(ctx, db.Pool, b); err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, db.Pool, exp); err != nil {
		t.Fatalf("Verify after an exact ingest: %v", err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO journal (id, payload, event_type, aggregate_id, tag)
		VALUES ('00000000-0000-4000-8000-000000000001', '{"id":"00000000-0000-4000-8000-000000000001"}', 't', 'a', $1)`, cfg.Destination); err != nil {
		t.Fatal(err)
	}
	if err := Verify(ctx, db.Pool, exp); err == nil || !strings.Contains(err.Error(), "unexpected") {
		t.Fatalf("Verify with an extra row = %v, want it reported", err)
	}
}

func TestPublishDeliversEveryMessage(t *testing.T) {
	addr := testenv.Broker(t)
	q := testenv.Queue(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exp, err := Publish(ctx, Config{Broker: stompx.Config{Addr: addr}, Destination: q, Messages: 300,
		DuplicateRatio: 0.3, MalformedRatio: 0.02, Seed: 9, Conns: 3, ReceiptEvery: 40, MaxBodyBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	if exp.Sent != 300 {
		t.Fatalf("sent = %d", exp.Sent)
	}
	conn, err := stompx.Dial(ctx, stompx.Config{Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Disconnect()
	sub, err := conn.Subscribe(q, stomp.AckAuto)
	if err != nil {
		t.Fatal(err)
	}
	for got := 0; got < exp.Sent; got++ {
		select {
		case m := <-sub.C:
			if m.Err != nil {
				t.Fatal(m.Err)
			}
			if m.Header.Get("persistent") != "true" {
				t.Fatalf("message %d not persistent", got)
			}
		case <-ctx.Done():
			t.Fatalf("received %d of %d", got, exp.Sent)
		}
	}
}
