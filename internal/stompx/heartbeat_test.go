package stompx

import (
	"context"
	"testing"
	"time"

	"github.com/go-stomp/stomp/v3"

	"github.com/inboxd/inboxd/internal/testenv"
)

// TestSilentBrokerNoticedWithinTwoHeartBeats: a broker that goes silent without closing
// the connection (a blackholed path, a paused VM) is noticed within two heart-beat
// intervals, as STOMP 1.2's heart-beating promises, not after go-stomp's default read
// timeout ((interval + 5 s) × the grace multiple: 30 s at 10 s beats, issue 27).
func TestSilentBrokerNoticedWithinTwoHeartBeats(t *testing.T) {
	const hb = time.Second
	proxy := testenv.StartFreezeProxy(t, testenv.Broker(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := DialConn(ctx, Config{Addr: proxy.Addr, HeartBeat: hb})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Abort()
	sub, err := c.Subscribe(testenv.Queue(t), stomp.AckClient)
	if err != nil {
		t.Fatal(err)
	}
	// Several beats pass while the broker answers: the connection must not be dropped.
	select {
	case m := <-sub.C:
		t.Fatalf("the live connection failed: %v", m.Err)
	case <-time.After(4 * hb):
	}
	proxy.Freeze()
	frozen := time.Now()
	select {
	case m := <-sub.C:
		took := time.Since(frozen)
		t.Logf("noticed after %s: %v", took.Round(time.Millisecond), m.Err)
		if m.Err == nil {
			t.Fatal("a message arrived from a frozen broker")
		}
		if took > 2*hb {
			t.Errorf("a silent broker noticed after %s, want within two heart-beats (%s)", took, 2*hb)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a silent broker not noticed within 30 s")
	}
}
