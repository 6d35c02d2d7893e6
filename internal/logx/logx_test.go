package logx

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := NewLimiter(time.Minute)
	l.now = func() time.Time { return now }
	if ok, _ := l.Allow("a"); !ok {
		t.Fatal("first line refused")
	}
	for i := 0; i < 1000; i++ {
		if ok, _ := l.Allow("a"); ok {
			t.Fatal("repeat allowed within the interval")
		}
	}
	if ok, _ := l.Allow("b"); !ok {
		t.Fatal("another key refused")
	}
	now = now.Add(time.Minute)
	if ok, dropped := l.Allow("a"); !ok || dropped != 1000 {
		t.Fatalf("after the interval: ok=%v dropped=%d, want true 1000", ok, dropped)
	}
	for i := 0; i < 3*maxLimiterKeys; i++ {
		l.Allow(string(rune(i)))
	}
	if len(l.keys) > maxLimiterKeys {
		t.Fatalf("%d keys kept", len(l.keys))
	}
}

// A failure that repeats is one line when the outage opens and one when it ends.
func TestOutageLogsOncePerOutage(t *testing.T) {
	var buf bytes.Buffer
	o := &Outage{Log: slog.New(slog.NewTextHandler(&buf, nil)), What: "broker", Level: slog.LevelWarn}
	o.Recovered("back") // no outage: nothing
	for range 50 {
		o.Fail("broker away", errors.New("connection refused"))
	}
	o.Recovered("broker back")
	o.Fail("broker away", errors.New("again"))
	out := buf.String()
	if n := strings.Count(out, "broker away"); n != 2 {
		t.Errorf("%d opening lines for two outages, want 2:\n%s", n, out)
	}
	if n := strings.Count(out, "broker back"); n != 1 || !strings.Contains(out, "failed_attempts=50") {
		t.Errorf("want one closing line with failed_attempts=50:\n%s", out)
	}
}
