package buildinfo

import (
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestRead: Read reports Version with the Go version.
func TestRead(t *testing.T) {
	i := Read()
	if i.Version != Version || i.Revision == "" || i.GoVersion != runtime.Version() {
		t.Errorf("Read() = %+v", i)
	}
}

// TestVersionIsNotTheLastRelease: a tree that is not a release's own commit has a
// "-dev" Version above the last release in RELEASES, so that "inboxd version" and
// inboxd_build_info tell a build of main from the release; a release's commit has
// exactly its tag, at least RELEASES' last line (the commit after it records it there).
func TestVersionIsNotTheLastRelease(t *testing.T) {
	semver := regexp.MustCompile(`^v(\d+)\.(\d+)\.(\d+)(-dev)?$`)
	m := semver.FindStringSubmatch(Version)
	if m == nil {
		t.Fatalf("Version %q is not vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-dev", Version)
	}
	if Release == (m[4] == "-dev") {
		t.Fatalf("Version %q with Release=%v: a release has no -dev, every other commit has it", Version, Release)
	}
	b, err := os.ReadFile("../../RELEASES")
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "v") {
			last = f[0]
		}
	}
	l := semver.FindStringSubmatch(last)
	if l == nil {
		t.Fatalf("RELEASES' last version %q does not parse", last)
	}
	cmp := 0
	for i := 1; i <= 3 && cmp == 0; i++ {
		a, _ := strconv.Atoi(m[i])
		b, _ := strconv.Atoi(l[i])
		cmp = a - b
	}
	switch {
	case Release && cmp < 0:
		t.Errorf("release %s is below RELEASES' last line (%s)", Version, last)
	case !Release && cmp <= 0:
		t.Errorf("Version %s is not above the last release %s: after a release, set the next patch with -dev", Version, last)
	}
}
