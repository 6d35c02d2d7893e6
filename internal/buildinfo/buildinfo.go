// Package buildinfo tells which inboxd this is: its release, the commit it was built
// from, and the Go that built it, for "inboxd version" and the inboxd_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Release is the release this source tree is, vMAJOR.MINOR.PATCH (CHANGELOG.md, RELEASES).
// It is raised when a release is cut; a build between two releases reports the last
// one with its revision.
const Release = "v0.1.0"

// Info is one build's identity.
type Info struct {
	Version   string // Release, or the module version a "go install …@vX.Y.Z" recorded
	Revision  string // the VCS commit, with "+dirty" for local changes; "unknown" without VCS stamping
	GoVersion string
}

// Read returns this binary's Info, from runtime/debug.ReadBuildInfo (the VCS stamp "go
// build" records in a git checkout) and Release.
func Read() Info {
	info := Info{Version: Release, Revision: "unknown", GoVersion: runtime.Version()}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return info
	}
	if v := bi.Main.Version; strings.HasPrefix(v, "v") && !strings.HasPrefix(v, "v0.0.0-") {
		info.Version = v // a tagged module version, as go install records it
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev != "" {
		info.Revision = rev
		if dirty {
			info.Revision += "+dirty"
		}
	}
	return info
}

// String is the line "inboxd version" prints.
func (i Info) String() string {
	return "inboxd " + i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}
