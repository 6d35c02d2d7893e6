package sqlbound

import (
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestSplit(t *testing.T) {
	id := func(n int) int { return n }
	for _, tc := range []struct {
		items     []int
		base, max int
		want      [][]int
	}{
		{nil, 0, 10, nil},
		{[]int{3, 3, 3}, 0, 10, [][]int{{3, 3, 3}}},
		{[]int{3, 3, 3, 3}, 0, 10, [][]int{{3, 3, 3}, {3}}},
		{[]int{3, 3, 3, 3}, 2, 10, [][]int{{3, 3}, {3, 3}}},
		{[]int{20, 1, 1}, 0, 10, [][]int{{20}, {1, 1}}},
		{[]int{1, 20, 1}, 0, 10, [][]int{{1}, {20}, {1}}},
		{[]int{10, 10}, 0, 10, [][]int{{10}, {10}}},
	} {
		t.Run(fmt.Sprint(tc.items, tc.base, tc.max), func(t *testing.T) {
			got := Split(tc.items, tc.base, tc.max, id)
			if !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Fatalf("Split = %v, want %v", got, tc.want)
			}
		})
	}
}

func FuzzSplit(f *testing.F) {
	f.Add([]byte{3, 200, 7}, 5, 100)
	f.Fuzz(func(t *testing.T, sizes []byte, base, max int) {
		if base < 0 || max <= 0 {
			return
		}
		items := []int{}
		for _, b := range sizes {
			items = append(items, int(b))
		}
		runs := Split(items, base, max, func(n int) int { return n })
		var flat []int
		for _, r := range runs {
			if len(r) == 0 {
				t.Fatal("empty run")
			}
			total := base
			for _, n := range r {
				total += n
			}
			if total > max && len(r) > 1 {
				t.Fatalf("run %v is %d bytes, over %d", r, total, max)
			}
			flat = append(flat, r...)
		}
		if !slices.Equal(flat, items) {
			t.Fatalf("runs %v lose or reorder items %v", runs, items)
		}
	})
}

func TestIsMessageTooLarge(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "08P01", Message: "message size 17 MiB bigger than maximum allowed message size 16 MiB"}, true},
		{fmt.Errorf("inserting: %w", &pgconn.PgError{Code: "08P01", Message: "message size 17 MiB bigger than maximum allowed message size 16 MiB"}), true},
		{&pgconn.PgError{Code: "08P01", Message: "invalid message format"}, false},
		{&pgconn.PgError{Code: "08006", Message: "bigger than maximum allowed message size"}, false},
		{fmt.Errorf("bigger than maximum allowed message size"), false},
		{nil, false},
	} {
		if got := IsMessageTooLarge(tc.err); got != tc.want {
			t.Errorf("IsMessageTooLarge(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
