package inboxdtest

import (
	"fmt"
	"testing"

	"github.com/inboxd/inboxd/internal/testenv"
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

// Standalone returns a TB for code outside a test, such as an Example or a plain
// program seeding a broker: Fatalf and Skipf panic with their message, and done runs
// the cleanups (the database's drop) in reverse order.
func Standalone(name string) (t TB, done func()) {
	s := &standalone{name: name}
	return s, s.done
}

type standalone struct {
	name     string
	cleanups []func()
}

func (s *standalone) Helper()                           {}
func (s *standalone) Cleanup(f func())                  { s.cleanups = append(s.cleanups, f) }
func (s *standalone) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (s *standalone) Errorf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (s *standalone) Skipf(format string, args ...any)  { panic(fmt.Sprintf(format, args...)) }
func (s *standalone) Logf(format string, args ...any)   {}
func (s *standalone) Name() string                      { return s.name }

func (s *standalone) done() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
}

// Main runs a package's tests from its TestMain, then fails the run when a goroutine
// is still running (goleak; a Client or pool a test forgot to stop). Without the
// services, and without CI=true, the package's Examples are skipped.
func Main(m *testing.M)       { testenv.Main(m) }
func (x tb) Skip(args ...any) { x.t.Helper(); x.t.Skipf("%s", fmt.Sprint(args...)) }
