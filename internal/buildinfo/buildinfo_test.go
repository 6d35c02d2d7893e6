package buildinfo

import (
	"regexp"
	"runtime"
	"testing"
)

// Release is a vMAJOR.MINOR.PATCH, and Read reports it with the Go version.
func TestRead(t *testing.T) {
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(Release) {
		t.Errorf("Release %q is not vMAJOR.MINOR.PATCH", Release)
	}
	i := Read()
	if i.Version == "" || i.Revision == "" || i.GoVersion != runtime.Version() {
		t.Errorf("Read() = %+v", i)
	}
}
