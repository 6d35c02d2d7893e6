// Package release reads RELEASES, the repository's record of inboxd's releases: each
// one's version, commit and last migration. The rolling-upgrade test builds the last
// one from the repository's history; the expand-only test holds the migrations after
// it to expanding the schema.
package release

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// Release is one line of RELEASES.
type Release struct {
	Version       string // vMAJOR.MINOR.PATCH
	Commit        string // the full commit hash
	LastMigration int    // the version of its newest migration
	Note          string
}

var (
	versionRE = regexp.MustCompile(`^v\d+\.\d+\.\d+$`)
	commitRE  = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// maxLine bounds one line of RELEASES.
const maxLine = 4096

// Parse reads RELEASES from r: '#' comments and blank lines aside, one release a line,
// "VERSION COMMIT LAST-MIGRATION [note…]", oldest first.
func Parse(r io.Reader) ([]Release, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 256), maxLine)
	var out []Release
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 || !versionRE.MatchString(f[0]) || !commitRE.MatchString(f[1]) {
			return nil, fmt.Errorf("RELEASES line %d: want vMAJOR.MINOR.PATCH, a 40-hex commit and the last migration: %q", n, line)
		}
		last, err := strconv.Atoi(f[2])
		if err != nil || last < 1 {
			return nil, fmt.Errorf("RELEASES line %d: last migration %q: want a positive number", n, f[2])
		}
		out = append(out, Release{Version: f[0], Commit: f[1], LastMigration: last, Note: strings.Join(f[3:], " ")})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading RELEASES: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("RELEASES lists no release")
	}
	return out, nil
}

// Last reads the file at path and returns its newest release.
func Last(path string) (Release, error) {
	f, err := os.Open(path)
	if err != nil {
		return Release{}, err
	}
	defer f.Close()
	rs, err := Parse(f)
	if err != nil {
		return Release{}, err
	}
	return rs[len(rs)-1], nil
}
