package webhook

// Waiters is the number of posts waiting for a batch in flight.
func (h *Handler) Waiters() int { return int(h.inflight.waiters.Load()) }
