package logx

import (
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
