// Package buildinfo tells which inboxd this is: its release, the commit it was built
// from, and the Go that built it, for "inboxd version" and the inboxd_build_info metric.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// Version is this source tree's version: the release's vMAJOR.MINOR.PATCH in the
// commit that cuts it (with Release true), and the next patch with "-dev" in every
// commit after it, so that a build of main between two releases never passes for the
// last one (CONTRIBUTING.md, "Releases").
const Version = "v0.3.1-dev"

// Release is true only in a release's own commit, where Version is its tag.
const Release = false

// Info is one build's identity.
type Info struct {
	Version   string // Version, or the module version a "go install …@vX.Y.Z" recorded
	Revision  string // the VCS commit, with "+dirty" for local changes; "unknown" without VCS stamping
	GoVersion string
}

// Read returns this binary's Info, from runtime/debug.ReadBuildInfo (the VCS stamp "go
// build" records in a git checkout) and Version.
func Read() Info {
	info := Info{Version: Version, Revision: "unknown", GoVersion: runtime.Version()}
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
