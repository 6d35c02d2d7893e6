package feed

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrTimingMisfit wraps the errors of CheckTiming.
var ErrTimingMisfit = errors.New("webhook timeouts do not fit the batch size")

// sinkMaxBackoff is the cap of the webhook sink's retry backoff: getSinkConfigFromJson
// sets retry.Options.MaxBackoff to 30s whatever Retry.Backoff says
// (pkg/ccl/changefeedccl/sink.go).
const sinkMaxBackoff = 30 * time.Second

// Timing is what decides how long the webhook takes over one batch, and how long each
// side waits for it.
//
// The sink posts a batch of up to FlushMessages rows and waits ClientTimeout
// (webhook_client_timeout, the sink's http.Client.Timeout: makeWebhookClient in
// pkg/ccl/changefeedccl/sink_webhook_v2.go) for a 2xx. Past it, it posts the same batch
// again after a backoff, Retry.Max times or forever (parallel_io.go, emitWithRetries);
// when the retries run out the changefeed job restarts from its last checkpoint and
// replays. inboxd processes the batch on Workers workers, each running its share in
// sequence, every handler for at most HandlerTimeout, the whole batch for at most
// ProcessTimeout, detached from the request: a retry joins the batch in flight, so
// handlers run once whatever the client timeout.
type Timing struct {
	ClientTimeout  time.Duration // webhook_client_timeout
	FlushMessages  int           // webhook_sink_config Flush.Messages
	Retry          Retry         // webhook_sink_config Retry
	HandlerTimeout time.Duration // inboxd -handler-timeout
	ProcessTimeout time.Duration // inboxd -webhook-process-timeout
	Workers        int           // workers on one full batch: process.Parts(FlushMessages, -concurrency)
}

// retryWindow is how long the sink keeps posting one batch before the job restarts:
// Max+1 posts of up to ClientTimeout each, and the backoffs between them (doubling from
// Retry.Backoff, capped at 30s). Zero for RetryForever.
func (t Timing) retryWindow() time.Duration {
	if t.Retry.Max == RetryForever {
		return 0
	}
	w := time.Duration(t.Retry.Max+1) * t.ClientTimeout
	b := t.Retry.Backoff
	for range t.Retry.Max {
		w += min(b, sinkMaxBackoff)
		b *= 2
	}
	return w
}

// CheckTiming returns an explanation of how t's values relate, and an error wrapping
// ErrTimingMisfit when they cannot work together.
func CheckTiming(t Timing) (string, error) {
	var problems []string
	if t.FlushMessages <= 0 {
		problems = append(problems, "Flush.Messages is not set: a batch's event count, and so the time it takes, has no bound to check the timeouts against")
	}
	if t.ClientTimeout <= 0 {
		problems = append(problems, "webhook_client_timeout is not set: the sink would wait on a hung webhook forever")
	}
	if t.HandlerTimeout <= 0 || t.ProcessTimeout <= 0 {
		problems = append(problems, "the handler timeout and the webhook process timeout must be positive")
	} else if t.ProcessTimeout < t.HandlerTimeout {
		problems = append(problems, fmt.Sprintf("the webhook process timeout (%s) is below the handler timeout (%s): a batch with one handler running to its timeout is cancelled at every delivery, so only the sweeper ever processes it; raise INBOXD_WEBHOOK_PROCESS_TIMEOUT",
			t.ProcessTimeout, t.HandlerTimeout))
	}
	if w := t.retryWindow(); w > 0 && w < t.ProcessTimeout {
		problems = append(problems, fmt.Sprintf("the sink gives a batch %d posts over about %s (Retry.Max %d, client timeout %s, backoff from %s), less than the webhook process timeout (%s): a batch that takes longer makes the changefeed restart from its last checkpoint and replay everything since; use Retry.Max \"inf\" (the default of changefeed create)",
			t.Retry.Max+1, w.Round(time.Millisecond), t.Retry.Max, t.ClientTimeout, t.Retry.Backoff, t.ProcessTimeout))
	}
	if len(problems) > 0 {
		return "", fmt.Errorf("%w: %s", ErrTimingMisfit, strings.Join(problems, "; "))
	}
	workers := max(t.Workers, 1)
	inSequence := (t.FlushMessages + workers - 1) / workers
	perEvent := func(d time.Duration) time.Duration { return (d / time.Duration(inSequence)).Round(time.Millisecond) }
	var b strings.Builder
	fmt.Fprintf(&b, "A batch of up to %d events runs on %d worker(s), %d events in sequence on each.\n", t.FlushMessages, workers, inSequence)
	fmt.Fprintf(&b, "- The sink waits %s for an answer: a batch whose handlers average under %s is answered on its first post.\n",
		t.ClientTimeout, perEvent(t.ClientTimeout))
	fmt.Fprintf(&b, "- A slower batch goes on past the sink's timeout, for up to %s (the webhook process timeout, %s per event); the sink's retries join it, handlers still run once, and the batch is answered on the first retry after it ends.\n",
		t.ProcessTimeout, perEvent(t.ProcessTimeout))
	if t.ClientTimeout < t.HandlerTimeout {
		fmt.Fprintf(&b, "- One handler may run %s, longer than the sink waits (%s): its batch is answered on a retry, up to a backoff later.\n",
			t.HandlerTimeout, t.ClientTimeout)
	}
	return b.String(), nil
}
