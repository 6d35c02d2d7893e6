package process

import (
	"slices"
	"testing"

	"github.com/inboxd/inboxd/internal/journal"
)

func TestHeldLeavesOutWhatSiblingsHold(t *testing.T) {
	t.Parallel()
	heads := func(ids ...string) []journal.Head {
		out := make([]journal.Head, len(ids))
		for i, id := range ids {
			out[i].ID = id
		}
		return out
	}
	var h held
	tests := []struct {
		name string
		do   func()
		ids  []string
		want []string
	}{
		{"nothing held", func() {}, []string{"a", "b"}, []string{"a", "b"}},
		{"one batch holds two", func() { h.add(heads("a", "c")) }, []string{"a", "b", "c", "d"}, []string{"b", "d"}},
		{"a second batch", func() { h.add(heads("d")) }, []string{"a", "b", "c", "d"}, []string{"b"}},
		{"the first one ended", func() { h.remove(heads("a", "c")) }, []string{"a", "b", "c", "d"}, []string{"a", "b", "c"}},
		{"all ended", func() { h.remove(heads("d")) }, []string{"d", "a"}, []string{"d", "a"}},
	}
	for _, tt := range tests { // in order: each step builds on the one before
		tt.do()
		if got := h.without(tt.ids); !slices.Equal(got, tt.want) {
			t.Errorf("%s: without(%v) = %v, want %v", tt.name, tt.ids, got, tt.want)
		}
	}
}
