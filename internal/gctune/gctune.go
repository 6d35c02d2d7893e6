// Package gctune sets the command line's garbage collector: a higher GOGC than Go's
// default, so that ingest and processing spend less CPU collecting, and a soft memory
// limit, so that the heap stays bounded all the same. An operator's GOGC or GOMEMLIMIT
// wins, each on its own.
package gctune

import (
	"math"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/inboxd/inboxd/internal/defaults"
)

// Settings are what Decide chose for Apply; a zero field is left to the environment.
type Settings struct {
	GCPercent   int   // 0: GOGC was set
	MemoryLimit int64 // 0: GOMEMLIMIT was set
}

// cgroupLimitFiles hold the container's memory limit: cgroup v2, then v1.
var cgroupLimitFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Decide returns the settings for an environment (getenv) and filesystem (readFile).
func Decide(getenv func(string) string, readFile func(string) ([]byte, error)) Settings {
	var s Settings
	if getenv("GOGC") == "" {
		s.GCPercent = defaults.GCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		s.MemoryLimit = defaults.MemoryLimit
		if c := cgroupLimit(readFile); c > 0 && c/4*3 < s.MemoryLimit {
			s.MemoryLimit = c / 4 * 3
		}
	}
	return s
}

// cgroupLimit is the first memory limit found, or 0: none, "max", or unreadable. cgroup
// v1 reports "no limit" as a huge number, which the caller's min leaves alone.
func cgroupLimit(readFile func(string) ([]byte, error)) int64 {
	for _, f := range cgroupLimitFiles {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || v <= 0 || v == math.MaxInt64 {
			return 0
		}
		return v
	}
	return 0
}

// Apply sets s on the running process.
func Apply(s Settings) {
	if s.GCPercent > 0 {
		debug.SetGCPercent(s.GCPercent)
	}
	if s.MemoryLimit > 0 {
		debug.SetMemoryLimit(s.MemoryLimit)
	}
}
