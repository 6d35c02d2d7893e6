package process

import (
	"github.com/inboxd/inboxd/internal/defaults"
)

// partSize is the number of events per part below which a delivered batch is not split
// further: a part is one worker's sequence of transactions.
const partSize = 32

// Parts is the number of parts ProcessBatch splits a batch of n events into, i.e. how
// many workers process it at once: at most concurrency (Config.Concurrency), one per 32
// events. Each part runs its events in sequence, in transactions of up to BatchSize.
func Parts(n, concurrency int) int {
	concurrency = defaults.Or(concurrency, defaults.Concurrency())
	return max(1, min(concurrency, (n+partSize-1)/partSize))
}
