package testenv

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// BrokerEnv is one of the brokers the broker scenarios run against: ActiveMQ, and the
// private RabbitMQ node (STOMP plugin) scripts/services.sh starts. It is plain data, so
// that packages below stompx can use it; stompx.Config takes its fields as they are.
type BrokerEnv struct {
	Name     string // "activemq" or "rabbitmq": stompx.Broker
	Addr     string // plaintext STOMP
	Login    string
	Passcode string
	Host     string // the STOMP host header: RabbitMQ's virtual host
	// TLSAddr is the stomp+ssl listener, server-authenticated; TLSDir holds ca.pem,
	// client.pem and client-key.pem for it.
	TLSAddr string
	TLSDir  string
}

// RabbitAddr is the RabbitMQ STOMP address the tests use: $INBOXD_TEST_RABBITMQ_ADDR,
// else the private node's 127.0.0.1:61623.
func RabbitAddr() string { return brokerTLSEnv("INBOXD_TEST_RABBITMQ_ADDR", "127.0.0.1:61623") }

// RabbitTLSDir is where scripts/services.sh puts the RabbitMQ node's TLS material.
func RabbitTLSDir() string {
	return brokerTLSEnv("INBOXD_TEST_RABBITMQ_TLS_DIR", "/var/lib/inboxd-rabbitmq/tls")
}

// ActiveMQEnv describes the shared ActiveMQ (not checked).
func ActiveMQEnv() BrokerEnv {
	return BrokerEnv{Name: "activemq", Addr: StompAddr(),
		TLSAddr: brokerTLSEnv("INBOXD_TEST_STOMP_TLS_ADDR", "127.0.0.1:61612"), TLSDir: BrokerTLSDir()}
}

// RabbitEnv describes the private RabbitMQ node (not checked).
func RabbitEnv() BrokerEnv {
	return BrokerEnv{Name: "rabbitmq", Addr: RabbitAddr(), Login: "guest", Passcode: "guest", Host: "/",
		TLSAddr: brokerTLSEnv("INBOXD_TEST_RABBITMQ_TLS_ADDR", "127.0.0.1:61624"), TLSDir: RabbitTLSDir()}
}

// BrokerFor returns the broker a test address belongs to: RabbitMQ's for RabbitAddr(),
// its TLS address or a StartPrivateRabbit node, else ActiveMQ's. Helpers that are handed an address use it to
// speak the right dialect.
func BrokerFor(addr string) BrokerEnv {
	if r := RabbitEnv(); addr == r.Addr || addr == r.TLSAddr {
		return r
	}
	if r, ok := privateRabbits.Load(addr); ok {
		return r.(BrokerEnv)
	}
	return ActiveMQEnv()
}

// Rabbit checks that the RabbitMQ node's STOMP listener answers and returns it; when it
// does not, the test fails in CI and skips otherwise.
func Rabbit(t testing.TB) BrokerEnv {
	t.Helper()
	Integration(t)
	r := RabbitEnv()
	conn, err := net.DialTimeout("tcp", r.Addr, 3*time.Second)
	if err != nil {
		unavailable(t, "rabbitmq stomp at %s: %v (run scripts/services.sh up)", r.Addr, err)
	}
	conn.Close()
	return r
}

// Brokers checks both brokers and returns them, ActiveMQ first.
func Brokers(t testing.TB) []BrokerEnv {
	t.Helper()
	a := ActiveMQEnv()
	a.Addr = Broker(t)
	return []BrokerEnv{a, Rabbit(t)}
}

// EachBroker runs f as a subtest per broker ("activemq", "rabbitmq"); the subtests of
// a parallel test run in parallel too.
func EachBroker(t *testing.T, f func(t *testing.T, b BrokerEnv)) {
	t.Helper()
	for _, b := range Brokers(t) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f(t, b)
		})
	}
}

// TLSFiles returns the broker's CA, client certificate and key files, checking that
// they are readable.
func (b BrokerEnv) TLSFiles(t testing.TB) (ca, cert, key string) {
	t.Helper()
	Integration(t)
	ca, cert, key = filepath.Join(b.TLSDir, "ca.pem"), filepath.Join(b.TLSDir, "client.pem"), filepath.Join(b.TLSDir, "client-key.pem")
	for _, f := range []string{ca, cert, key} {
		fh, err := os.Open(f)
		if err != nil {
			unavailable(t, "%s TLS material: %v (scripts/services.sh up generates it)", b.Name, err)
		}
		fh.Close()
	}
	conn, err := net.DialTimeout("tcp", b.TLSAddr, 3*time.Second)
	if err != nil {
		unavailable(t, "%s stomp+ssl at %s: %v (run scripts/services.sh up)", b.Name, b.TLSAddr, err)
	}
	conn.Close()
	return ca, cert, key
}

// RabbitBase is the private RabbitMQ node's directory (its HOME, with the Erlang
// cookie rabbitmqctl needs): $INBOXD_TEST_RABBITMQ_BASE, else /var/lib/inboxd-rabbitmq.
func RabbitBase() string {
	return brokerTLSEnv("INBOXD_TEST_RABBITMQ_BASE", "/var/lib/inboxd-rabbitmq")
}

// rabbitmqctl runs the CLI against the shared node that scripts/services.sh runs.
func rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	if _, err := os.Stat(rabbitmqctlPath); err != nil {
		unavailable(t, "rabbitmqctl: %v (scripts/services.sh up installs rabbitmq-server)", err)
	}
	out, err := runRabbitmqctl("inboxd-rabbit@localhost", RabbitBase(), args...)
	if err != nil {
		unavailable(t, "%v", err)
	}
	return out
}

const rabbitmqctlPath = "/usr/lib/rabbitmq/bin/rabbitmqctl"

// runRabbitmqctl runs the CLI against node, whose Erlang cookie is in home.
func runRabbitmqctl(node, home string, args ...string) (string, error) {
	cmd := exec.Command(rabbitmqctlPath, append([]string{"-n", node, "-q"}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("rabbitmqctl %s on %s: %w: %s", strings.Join(args, " "), node, err, out)
	}
	return string(out), nil
}

// DeclareRabbitQueue declares a durable queue with arguments (for example
// x-single-active-consumer, which the STOMP plugin cannot declare) on the RabbitMQ
// node's virtual host /, as an operator would, by importing definitions, and waits
// until it exists. STOMP clients reach it as /amq/queue/<name>.
func DeclareRabbitQueue(t testing.TB, name string, args map[string]any) {
	t.Helper()
	Integration(t)
	defs, err := json.Marshal(map[string]any{"queues": []map[string]any{{
		"name": name, "vhost": "/", "durable": true, "auto_delete": false, "arguments": args}}})
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "definitions.json")
	if err := os.WriteFile(f, defs, 0o644); err != nil {
		t.Fatal(err)
	}
	rabbitmqctl(t, "import_definitions", f)
	// The import is asynchronous.
	Eventually(t, 30*time.Second, "queue "+name+" declared", func() bool {
		for _, l := range strings.Split(rabbitmqctl(t, "list_queues", "name"), "\n") {
			if strings.TrimSpace(l) == name {
				return true
			}
		}
		return false
	})
	t.Cleanup(func() {
		// Best effort: a leftover queue holds nothing once the test drained it.
		cmd := exec.Command("/usr/lib/rabbitmq/bin/rabbitmqctl", "-n", "inboxd-rabbit@localhost", "-q", "delete_queue", name)
		cmd.Env = append(os.Environ(), "HOME="+RabbitBase())
		_ = cmd.Run()
	})
}
