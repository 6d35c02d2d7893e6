package process

import (
	"sync"

	"github.com/inboxd/inboxd/internal/journal"
)

// held is the set of entries this engine's open batches hold locked. A worker leaves
// them out of what it tries to lock: they are locked, and SKIP LOCKED would pass over
// them one by one, in a statement of its own per chunk, only to find nothing. Under
// e2e-max's load two workers kicked together picked the same due heads, and the second
// sent 2.3 lock statements per batch on average. It is a hint only: the row lock is the
// claim, so an entry another worker locks just after this one looked is skipped by
// the database, as before, and one held by another instance is never in this set.
type held struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

func (h *held) add(heads []journal.Head) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids == nil {
		h.ids = make(map[string]struct{}, len(heads))
	}
	for _, x := range heads {
		h.ids[x.ID] = struct{}{}
	}
}

func (h *held) remove(heads []journal.Head) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, x := range heads {
		delete(h.ids, x.ID)
	}
}

// without returns ids less the held ones, in the same order (ids itself when none is).
func (h *held) without(ids []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ids) == 0 {
		return ids
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, ok := h.ids[id]; !ok {
			out = append(out, id)
		}
	}
	return out
}
