package inboxdtest

import (
	"fmt"
	"testing"
)

// tb lends a TB to the repository's own test helpers, which take a testing.TB: only the
// methods they call are the TB's; any other would panic on the nil testing.TB.
type tb struct {
	testing.TB
	t TB
}

func (x tb) Helper()                           { x.t.Helper() }
func (x tb) Cleanup(f func())                  { x.t.Cleanup(f) }
func (x tb) Fatalf(format string, args ...any) { x.t.Fatalf(format, args...) }
func (x tb) Errorf(format string, args ...any) { x.t.Errorf(format, args...) }
func (x tb) Skipf(format string, args ...any)  { x.t.Skipf(format, args...) }
func (x tb) Logf(format string, args ...any)   { x.t.Logf(format, args...) }
func (x tb) Name() string                      { return x.t.Name() }
func (x tb) Fatal(args ...any)                 { x.t.Helper(); x.t.Fatalf("%s", fmt.Sprint(args...)) }
