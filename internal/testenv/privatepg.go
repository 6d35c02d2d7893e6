package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PrivatePostgres is a PostgreSQL cluster of one test's own (initdb in a temporary
// directory, a free port), which the test may crash, stop and start: a real database
// outage that disturbs no one else. It runs as user postgres, so it needs root and the
// PostgreSQL server binaries (/usr/lib/postgresql/<version>/bin), which
// scripts/services.sh installs.
type PrivatePostgres struct {
	Port int
	URL  string // postgres://postgres@127.0.0.1:<port>/inboxd?sslmode=disable

	t        testing.TB
	bin, dir string
	uid, gid int
}

// StartPrivatePostgres creates and starts a private cluster, stopped when the test ends.
func StartPrivatePostgres(t testing.TB) *PrivatePostgres {
	t.Helper()
	Integration(t)
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		unavailable(t, "no PostgreSQL server binaries under /usr/lib/postgresql")
	}
	sort.Strings(bins)
	if os.Geteuid() != 0 {
		unavailable(t, "a private postgresql must be started as root (it switches to user postgres)")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		unavailable(t, "user postgres: %v", err)
	}
	p := &PrivatePostgres{t: t, bin: filepath.Dir(bins[len(bins)-1]), Port: freePort(t)}
	p.uid, _ = strconv.Atoi(u.Uid)
	p.gid, _ = strconv.Atoi(u.Gid)
	base, err := os.MkdirTemp("", "inboxd-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	if err := os.Chown(base, p.uid, p.gid); err != nil {
		t.Fatal(err)
	}
	p.dir = filepath.Join(base, "data")
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/inboxd?sslmode=disable", p.Port)
	if out, err := p.run("initdb", "-D", p.dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = p.run("pg_ctl", "-D", p.dir, "-m", "immediate", "-w", "stop") })
	p.Start()
	return p
}

func (p *PrivatePostgres) run(name string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = filepath.Dir(p.dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.gid)}}
	return cmd.CombinedOutput()
}

// Start starts the cluster and waits until it accepts connections.
func (p *PrivatePostgres) Start() {
	p.t.Helper()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c max_connections=200",
		p.Port, filepath.Dir(p.dir))
	if out, err := p.run("pg_ctl", "-D", p.dir, "-l", filepath.Join(filepath.Dir(p.dir), "postgres.log"),
		"-o", opts, "-w", "-t", "60", "start"); err != nil {
		p.t.Fatalf("starting private postgresql: %v\n%s", err, out)
	}
}

// Crash stops the cluster with pg_ctl -m immediate: every backend quits at once, with
// no checkpoint, as in a crash; the next Start runs crash recovery.
func (p *PrivatePostgres) Crash() {
	p.t.Helper()
	if out, err := p.run("pg_ctl", "-D", p.dir, "-m", "immediate", "-w", "stop"); err != nil {
		p.t.Fatalf("stopping private postgresql: %v\n%s", err, out)
	}
}

// Restart crashes the cluster and starts it again at once.
func (p *PrivatePostgres) Restart() {
	p.t.Helper()
	p.Crash()
	p.Start()
}

// Outage crashes the cluster, keeps it down for d, and starts it again.
func (p *PrivatePostgres) Outage(d time.Duration) {
	p.t.Helper()
	p.Crash()
	time.Sleep(d) // the outage itself
	p.Start()
}
