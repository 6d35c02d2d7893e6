package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// PrivateBroker is an ActiveMQ of one test's own, on a free port, which the test may
// kill and start again on the same data directory. Never use the shared broker for that:
// other tests are running against it.
type PrivateBroker struct {
	Addr string // 127.0.0.1:<port> of its STOMP connector
	// TLSAddr and MutualTLSAddr are its stomp+ssl connectors (the second with
	// transport.needClientAuth=true); only StartPrivateTLSBroker opens them.
	TLSAddr, MutualTLSAddr string

	t    testing.TB
	base string
	mu   sync.Mutex
	cmd  *exec.Cmd
	// command builds the broker's launch command: ActiveMQ's (activemqCommand) unless
	// set, as StartPrivateRabbit sets it.
	command func() (*exec.Cmd, error)
	name    string // "activemq" or "rabbitmq", for messages
	node    string // a RabbitMQ node's name, for rabbitmqctl
}

// StartPrivateBroker starts a private ActiveMQ (configured from scripts/activemq.xml,
// STOMP on a free port) and stops it when the test ends. It needs root (the broker runs
// as user activemq) and the activemq package; without them it skips, or fails in CI.
func StartPrivateBroker(t testing.TB) *PrivateBroker {
	t.Helper()
	return startPrivateBroker(t, "", "")
}

// StartPrivateTLSBroker is StartPrivateBroker with the stomp+ssl connectors of
// scripts/activemq.xml too, on free ports, serving keystore and trusting truststore
// (PKCS12 files with the password "inboxd-dev", as scripts/broker-tls.sh makes them).
func StartPrivateTLSBroker(t testing.TB, keystore, truststore string) *PrivateBroker {
	t.Helper()
	return startPrivateBroker(t, keystore, truststore)
}

// tlsBlocks are the parts of scripts/activemq.xml that need the TLS stores.
var tlsBlocks = regexp.MustCompile(`(?s)[ \t]*<!-- BEGIN tls.*?<!-- END tls -->\n?`)

func startPrivateBroker(t testing.TB, keystore, truststore string) *PrivateBroker {
	t.Helper()
	Integration(t)
	if _, err := exec.LookPath("activemq"); err != nil {
		unavailable(t, "activemq is not installed: %v", err)
	}
	if os.Geteuid() != 0 {
		unavailable(t, "a private activemq must be started as root (it switches to user activemq)")
	}
	_, self, _, _ := runtime.Caller(0)
	conf, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "scripts", "activemq.xml"))
	if err != nil {
		t.Fatalf("reading scripts/activemq.xml: %v", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	var tlsAddr, mutualAddr string
	if keystore != "" {
		tlsAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
		mutualAddr = "127.0.0.1:" + strconv.Itoa(freePort(t))
	}
	if conf, err = privateConf(conf, addr, tlsAddr, mutualAddr); err != nil {
		t.Fatal(err)
	}

	// Not t.TempDir: its parent is private to root, and the broker runs as activemq.
	base, err := os.MkdirTemp("", "inboxd-activemq-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(base) })
	for _, d := range []string{"conf/tls", "data/kahadb", "tmp"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if keystore != "" {
		// Where activemq.xml's <sslContext> looks: ${activemq.conf}/tls.
		for src, dst := range map[string]string{keystore: "broker.ks", truststore: "broker.ts"} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatalf("private broker TLS store: %v", err)
			}
			if err := os.WriteFile(filepath.Join(base, "conf", "tls", dst), b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(base, "conf", "activemq.xml"), conf, 0o644); err != nil {
		t.Fatal(err)
	}
	if l4j, err := os.ReadFile("/etc/activemq/instances-available/main/log4j2.properties"); err == nil {
		_ = os.WriteFile(filepath.Join(base, "conf", "log4j2.properties"), l4j, 0o644)
	}
	uid, gid := activemqUser(t)
	// A data directory the broker cannot write makes it hang without a word.
	if err := filepath.Walk(base, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	}); err != nil {
		t.Fatalf("chown %s: %v", base, err)
	}
	b := &PrivateBroker{Addr: addr, TLSAddr: tlsAddr, MutualTLSAddr: mutualAddr, t: t, base: base}
	t.Cleanup(b.Kill)
	b.Start()
	return b
}

// privateConf rewrites scripts/activemq.xml for a private broker: its STOMP connector
// on addr, and its stomp+ssl connectors on tlsAddr and mutualAddr, or none when those
// are empty (the shared broker's stores are not a private broker's to read).
func privateConf(conf []byte, addr, tlsAddr, mutualAddr string) ([]byte, error) {
	s := string(conf)
	if !strings.Contains(s, "127.0.0.1:61613") {
		return nil, fmt.Errorf("scripts/activemq.xml no longer has the stomp://127.0.0.1:61613 connector this helper rewrites")
	}
	s = strings.ReplaceAll(s, "127.0.0.1:61613", addr)
	if tlsAddr == "" {
		s = tlsBlocks.ReplaceAllString(s, "")
		if strings.Contains(s, "sslContext") || strings.Contains(s, "stomp+ssl") {
			return nil, fmt.Errorf("scripts/activemq.xml has TLS settings outside its BEGIN tls ... END tls blocks")
		}
		return []byte(s), nil
	}
	for _, shared := range []string{"127.0.0.1:61612", "127.0.0.1:61611"} {
		if !strings.Contains(s, shared) {
			return nil, fmt.Errorf("scripts/activemq.xml no longer has the stomp+ssl connector on %s this helper rewrites", shared)
		}
	}
	return []byte(strings.NewReplacer("127.0.0.1:61612", tlsAddr, "127.0.0.1:61611", mutualAddr).Replace(s)), nil
}

func activemqUser(t testing.TB) (uid, gid int) {
	t.Helper()
	u, err := user.Lookup("activemq")
	if err != nil {
		unavailable(t, "user activemq: %v", err)
	}
	uid, _ = strconv.Atoi(u.Uid)
	gid, _ = strconv.Atoi(u.Gid)
	return uid, gid
}

// FreeAddr returns 127.0.0.1:<port> with a port that was free a moment ago, for a
// server a test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

// freePorts is the range freePort draws from: below Linux's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range, 32768–60999 by default), so that no outgoing
// connection of any process, and no listener on port 0, takes a port between freePort's
// check and the server's bind. Ports from the ephemeral range itself were taken so by
// the other test processes of make test, which runs three groups at once ("address
// already in use", or a request answered by another test's server).
const freePortLow, freePortHigh = 20000, 32000

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{} // never handed out twice by one process
)

func freePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		p := freePortLow + rand.IntN(freePortHigh-freePortLow)
		if portsGiven[p] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // in use
		}
		l.Close()
		portsGiven[p] = true
		return p
	}
	t.Fatalf("no free port in %d–%d after 1000 tries", freePortLow, freePortHigh)
	return 0
}

// Start launches the broker (as scripts/services.sh does) and waits for its STOMP port.
// The process runs in a process group of its own, so Kill reaches the broker's VM and
// nothing else.
func (b *PrivateBroker) Start() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		b.t.Fatal("private broker already running")
	}
	command := b.command
	if command == nil {
		command = b.activemqCommand
	}
	cmd, err := command()
	if err != nil {
		b.t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(b.base, "console.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.t.Fatalf("starting private %s: %v", b.kind(), err)
	}
	b.cmd = cmd
	deadline := time.Now().Add(90 * time.Second)
	for _, addr := range []string{b.Addr, b.TLSAddr, b.MutualTLSAddr} {
		for addr != "" {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				c.Close()
				break
			}
			if time.Now().After(deadline) {
				out, _ := os.ReadFile(filepath.Join(b.base, "console.log"))
				b.t.Fatalf("private %s did not open %s within 90s; console:\n%s", b.kind(), addr, tail(string(out), 3000))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// Kill stops the broker with SIGKILL (no clean shutdown, as in a crash) and waits for
// its port to close. It is a no-op when the broker is not running.
func (b *PrivateBroker) Kill() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	pgid := b.cmd.Process.Pid // Setpgid: the group id is the launcher's pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	_ = b.cmd.Wait()
	b.cmd = nil
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		// The JVM may outlive the launcher by a moment; the group is gone when kill fails.
		if err := syscall.Kill(-pgid, 0); err != nil {
			return
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		time.Sleep(50 * time.Millisecond)
	}
	b.t.Errorf("private %s (process group %d) still alive 30s after SIGKILL", b.kind(), pgid)
}

// String names the broker in test logs.
func (b *PrivateBroker) String() string {
	return fmt.Sprintf("private %s at %s (%s)", b.kind(), b.Addr, b.base)
}

func (b *PrivateBroker) kind() string {
	if b.name == "" {
		return "activemq"
	}
	return b.name
}

// activemqCommand is `activemq console` as scripts/services.sh runs it, as user
// activemq in a process group of its own.
func (b *PrivateBroker) activemqCommand() (*exec.Cmd, error) {
	uid, gid := activemqUser(b.t)
	cmd := exec.Command("activemq", "console", "xbean:file:"+filepath.Join(b.base, "conf", "activemq.xml"))
	cmd.Dir = b.base
	cmd.Env = append(os.Environ(),
		"HOME="+b.base,
		"ACTIVEMQ_BASE="+b.base,
		"ACTIVEMQ_CONF="+filepath.Join(b.base, "conf"),
		"ACTIVEMQ_DATA="+filepath.Join(b.base, "data"),
		"ACTIVEMQ_TMP="+filepath.Join(b.base, "tmp"),
		// The default pid file is /run/activemq.pid, which the shared broker may own.
		"ACTIVEMQ_PIDFILE="+filepath.Join(b.base, "activemq.pid"),
		"ACTIVEMQ_USER=activemq",
	)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
	}
	return cmd, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
