package message

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestCheckDestination(t *testing.T) {
	for d, want := range map[string]bool{
		"/queue/orders": true, "/topic/VirtualTopic.orders": true, "/queue/a:b-c_d.e": true,
		"/queue/" + strings.Repeat("x", 200): true, "/queue/" + strings.Repeat("x", 201): false,
		"/queue/": false, "/queue": false, "queue/x": false, "/temp-queue/x": false,
		"/queue/a,/queue/b": false, "/topic/a.>": false, "/queue/a*": false, "/queue/a b": false,
		"/queue/a\n": false, "/queue/é": false, "/queue/a\x00": false,
	} {
		err := CheckDestination(d)
		if (err == nil) != want || (err != nil && !errors.Is(err, ErrInvalidDestination)) {
			t.Errorf("CheckDestination(%q) = %v, want ok %v", d, err, want)
		}
	}
}

// The rule is the regular expression Emit used: /^\/(queue|topic)\/[A-Za-z0-9_.:-]{1,200}$/.
func FuzzCheckDestination(f *testing.F) {
	re := regexp.MustCompile(`^/(queue|topic)/[A-Za-z0-9_.:-]{1,200}$`)
	for _, s := range []string{"/queue/x", "/topic/a,b", "/queue/" + strings.Repeat("y", 200), "/queue/\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, d string) {
		if got, want := CheckDestination(d) == nil, re.MatchString(d); got != want {
			t.Fatalf("CheckDestination(%q) ok = %v, the rule says %v", d, got, want)
		}
	})
}
