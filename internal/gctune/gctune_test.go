package gctune

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/inboxd/inboxd/internal/defaults"
)

func TestDecide(t *testing.T) {
	noFile := func(string) ([]byte, error) { return nil, fs.ErrNotExist }
	file := func(path, content string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if p == path {
				return []byte(content), nil
			}
			return nil, errors.New("no such file")
		}
	}
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name     string
		getenv   func(string) string
		readFile func(string) ([]byte, error)
		want     Settings
	}{
		{"defaults", env(), noFile, Settings{defaults.GCPercent, defaults.MemoryLimit}},
		{"the operator's GOGC wins", env("GOGC", "100"), noFile, Settings{0, defaults.MemoryLimit}},
		{"GOGC=off wins too", env("GOGC", "off"), noFile, Settings{0, defaults.MemoryLimit}},
		{"the operator's GOMEMLIMIT wins", env("GOMEMLIMIT", "2GiB"), noFile, Settings{defaults.GCPercent, 0}},
		{"a small cgroup v2 limit lowers it", env(), file(cgroupLimitFiles[0], "268435456\n"), Settings{defaults.GCPercent, 3 << 26}},
		{"cgroup v2 without a limit", env(), file(cgroupLimitFiles[0], "max\n"), Settings{defaults.GCPercent, defaults.MemoryLimit}},
		{"a large cgroup v2 limit leaves it", env(), file(cgroupLimitFiles[0], "8589934592"), Settings{defaults.GCPercent, defaults.MemoryLimit}},
		{"cgroup v1's no-limit number", env(), file(cgroupLimitFiles[1], "9223372036854771712"), Settings{defaults.GCPercent, defaults.MemoryLimit}},
		{"a small cgroup v1 limit lowers it", env(), file(cgroupLimitFiles[1], "134217728"), Settings{defaults.GCPercent, 3 << 25}},
		{"garbage in the file is no limit", env(), file(cgroupLimitFiles[0], "lots"), Settings{defaults.GCPercent, defaults.MemoryLimit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.getenv, tc.readFile); got != tc.want {
				t.Errorf("Decide = %+v, want %+v", got, tc.want)
			}
		})
	}
}
