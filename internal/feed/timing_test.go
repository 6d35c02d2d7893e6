package feed

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCheckTiming(t *testing.T) {
	t.Parallel()
	fits := Timing{ClientTimeout: 10 * time.Second, FlushMessages: 100, Retry: Retry{Max: RetryForever, Backoff: 500 * time.Millisecond},
		HandlerTimeout: 30 * time.Second, ProcessTimeout: 5 * time.Minute, Workers: 2}
	tests := []struct {
		name    string
		edit    func(*Timing)
		misfit  string   // part of the error; empty: fits
		explain []string // parts of the explanation
	}{
		{name: "defaults", edit: func(*Timing) {},
			explain: []string{"100 events runs on 2 worker(s), 50 events in sequence", "under 200ms is answered on its first post",
				"for up to 5m0s (the webhook process timeout, 6s per event)", "handlers still run once",
				"One handler may run 30s, longer than the sink waits (10s)"}},
		{name: "the issue's reproduction", edit: func(t *Timing) { t.ClientTimeout, t.FlushMessages = 3*time.Second, 40 },
			explain: []string{"40 events runs on 2 worker(s), 20 events in sequence", "under 150ms is answered on its first post"}},
		{name: "client outwaits the handler", edit: func(t *Timing) { t.ClientTimeout = time.Minute },
			explain: []string{"under 1.2s"}},
		{name: "process timeout below handler timeout", edit: func(t *Timing) { t.ProcessTimeout = 20 * time.Second },
			misfit: "process timeout (20s) is below the handler timeout (30s)"},
		{name: "no flush messages", edit: func(t *Timing) { t.FlushMessages = 0 }, misfit: "Flush.Messages is not set"},
		{name: "no client timeout", edit: func(t *Timing) { t.ClientTimeout = 0 }, misfit: "webhook_client_timeout is not set"},
		// 4 posts of 10s and backoffs of 0.5+1+2s: 43.5s, under the 5m a batch may take.
		{name: "finite retries shorter than a batch", edit: func(t *Timing) { t.Retry.Max = 3 },
			misfit: "4 posts over about 43.5s"},
		{name: "finite retries longer than a batch", edit: func(t *Timing) { t.Retry.Max, t.ProcessTimeout = 30, time.Minute },
			explain: []string{"for up to 1m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tm := fits
			tt.edit(&tm)
			got, err := CheckTiming(tm)
			if tt.misfit != "" {
				if !errors.Is(err, ErrTimingMisfit) || !strings.Contains(err.Error(), tt.misfit) {
					t.Fatalf("CheckTiming = %v, want ErrTimingMisfit with %q", err, tt.misfit)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range tt.explain {
				if !strings.Contains(got, want) {
					t.Errorf("explanation lacks %q:\n%s", want, got)
				}
			}
		})
	}
}
