package database

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Version is a CockroachDB release, as its crdb_version names it.
type Version struct {
	Major, Minor, Patch int
	Pre                 string // "beta.2" of v24.1.0-beta.2; "" for a release
}

func (v Version) String() string {
	s := fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	return s
}

// Less orders by major, minor and patch; a pre-release counts as its release, which is
// what a feature check wants (features land before the release is tagged).
func (v Version) Less(o Version) bool {
	if v.Major != o.Major {
		return v.Major < o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor < o.Minor
	}
	return v.Patch < o.Patch
}

// MinVersion is the oldest CockroachDB inboxd supports. v24.1 is the first with the
// ttl_disable_changefeed_replication storage parameter that "inboxd migrate" sets with
// row-level TTL (docs src/current/_includes/v24.1/cdc/disable-replication-ttl.md, "new
// in v24.1"; v23.2 has only the cluster-wide sql.ttl.changefeed_replication.disabled,
// _includes/v23.2/cdc/disable-replication-ttl.md). An older cluster fails migrate halfway
// with an unknown storage parameter, so migrate and changefeed create refuse it first.
var MinVersion = Version{Major: 24, Minor: 1}

// CDCQueriesNeedLicense reports whether v still needs an Enterprise license key for
// CREATE CHANGEFEED … INTO a sink and for CDC queries (the outbox feed and the default
// filtered journal feed). v24.1.7, v24.2.5 and v24.3.0 moved to the CockroachDB
// Software License, under which no feature needs a key (release notes
// src/current/_includes/releases/v24.1/v24.1.7.md and v24.2/v24.2.5.md, "Changed the
// license cockroach is distributed under to the new CockroachDB Software License";
// docs licensing-faqs). Unlicensed, an older release refuses with XXC02.
func (v Version) CDCQueriesNeedLicense() bool {
	switch {
	case v.Major != 24:
		return v.Major < 24
	case v.Minor == 1:
		return v.Patch < 7
	case v.Minor == 2:
		return v.Patch < 5
	default:
		return v.Minor < 1
	}
}

// ErrBadVersion wraps every error of ParseVersion.
var ErrBadVersion = errors.New("unreadable CockroachDB version")

// ErrVersionTooOld is returned by CheckVersion for a release older than MinVersion.
var ErrVersionTooOld = errors.New("CockroachDB version too old for inboxd")

// maxVersionLen bounds the crdb_version inboxd reads: it comes from the server.
const maxVersionLen = 512

// ParseVersion reads the release out of a crdb_version value, which CockroachDB reports
// at connection start (pkg/sql/pgwire/conn.go, statusReportParams) as build.Info.Short():
// "CockroachDB CCL v24.3.5 (x86_64-pc-linux-gnu, built 2025/01/30 17:10:49, go1.22.8)"
// (pkg/build/info.go). The first word of the form vMAJOR.MINOR[.PATCH][-PRE] before the
// parenthesis is the release; a bare "v24.3.5" or "24.3.5" is accepted too.
func ParseVersion(s string) (Version, error) {
	if len(s) > maxVersionLen {
		return Version{}, fmt.Errorf("%w: %d bytes", ErrBadVersion, len(s))
	}
	head, _, _ := strings.Cut(s, "(")
	for _, w := range strings.Fields(head) {
		if v, ok := parseTag(w); ok {
			return v, nil
		}
	}
	return Version{}, fmt.Errorf("%w: %q names no vMAJOR.MINOR.PATCH", ErrBadVersion, s)
}

func parseTag(w string) (Version, bool) {
	w = strings.TrimPrefix(w, "v")
	core, pre, hasPre := strings.Cut(w, "-")
	if hasPre && (pre == "" || strings.ContainsFunc(pre, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '-')
	})) {
		return Version{}, false
	}
	parts := strings.Split(core, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return Version{}, false
	}
	var n [3]int
	for i, p := range parts {
		if p == "" || len(p) > 4 || strings.Trim(p, "0123456789") != "" {
			return Version{}, false
		}
		n[i], _ = strconv.Atoi(p)
	}
	if n[0] == 0 {
		return Version{}, false
	}
	return Version{Major: n[0], Minor: n[1], Patch: n[2], Pre: pre}, true
}

// CheckVersion checks a server's crdb_version against MinVersion. crdbVersion "" (no
// such parameter: PostgreSQL) passes with a zero Version. A version too old, or one it
// cannot read, is an error that says what to do.
func CheckVersion(crdbVersion string) (Version, error) {
	if crdbVersion == "" {
		return Version{}, nil
	}
	v, err := ParseVersion(crdbVersion)
	if err != nil {
		return Version{}, err
	}
	if v.Less(MinVersion) {
		return v, fmt.Errorf("%w: the server runs %s, inboxd needs v%d.%d or later "+
			"(row-level TTL with ttl_disable_changefeed_replication, and CDC queries); upgrade the cluster",
			ErrVersionTooOld, v, MinVersion.Major, MinVersion.Minor)
	}
	return v, nil
}
