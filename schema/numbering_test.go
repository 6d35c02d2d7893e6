package schema_test

import (
	"os/exec"
	"path"
	"strconv"
	"strings"
	"testing"

	"github.com/inboxd/inboxd/internal/release"
	"github.com/inboxd/inboxd/schema"
)

// Every migration the last release (RELEASES) did not have is numbered above that
// release's newest. Numbers are handed out ahead to work that lands in any order, so
// a free number below it (0010 to 0012 today) could otherwise be taken: every release
// that has a newer one would run beside it unchecked (Check refuses an unknown
// migration at or below its newest) and the expand-only rule, which reads the
// migrations after the last release's, would not read it. The release's own files are
// read from its commit in this repository's history.
func TestNewMigrationsNumberedAfterLastRelease(t *testing.T) {
	t.Parallel()
	rel, err := release.Last("../RELEASES")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to read release %s's migrations: %v", rel.Version, err)
	}
	out, err := exec.Command("git", "-C", "..", "ls-tree", "--name-only", rel.Commit, "schema/").CombinedOutput()
	if err != nil {
		t.Fatalf("listing release %s's migrations (git ls-tree %s): %v\n%s", rel.Version, rel.Commit, err, out)
	}
	released := map[string]bool{}
	for _, name := range strings.Fields(string(out)) {
		if base := path.Base(name); strings.HasSuffix(base, ".sql") {
			released[base] = true
			prefix, _, _ := strings.Cut(base, "_")
			if v, err := strconv.Atoi(prefix); err == nil && v > rel.LastMigration {
				t.Errorf("RELEASES: %s's last migration is %d, but it has %s", rel.Version, rel.LastMigration, base)
			}
		}
	}
	if len(released) == 0 {
		t.Fatalf("release %s (%s) has no migrations under schema/", rel.Version, rel.Commit)
	}
	ms, err := schema.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !released[m.Name] && m.Version <= rel.LastMigration {
			t.Errorf("%s is new since release %s but numbered %d, at or below its newest (%d): number it above", m.Name, rel.Version, m.Version, rel.LastMigration)
		}
	}
}
