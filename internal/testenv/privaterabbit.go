package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// privateRabbits maps the STOMP address of each private RabbitMQ node to its broker,
// so that BrokerFor speaks RabbitMQ's dialect to it.
var privateRabbits sync.Map // string → BrokerEnv

const rabbitServer = "/usr/lib/rabbitmq/bin/rabbitmq-server"

// StartPrivateRabbit starts a RabbitMQ node of the test's own (STOMP plugin on a free
// port, guest/guest, its own node name, ports, cookie and data directory, as
// scripts/services.sh starts the shared one), which the test may kill and start again
// on the same data, and stops it when the test ends. Without rabbitmq-server it skips,
// or fails in CI.
func StartPrivateRabbit(t testing.TB) *PrivateBroker {
	t.Helper()
	Integration(t)
	if _, err := os.Stat(rabbitServer); err != nil {
		unavailable(t, "rabbitmq-server is not installed: %v (scripts/services.sh up installs it)", err)
	}
	base := t.TempDir()
	addr := FreeAddr(t)
	amqp, dist := freePort(t), freePort(t)
	conf := fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nstomp.listeners.tcp.1 = %s\nloopback_users.guest = true\n"+
		"disk_free_limit.absolute = 50MB\n", amqp, addr)
	files := map[string]string{"rabbitmq.conf": conf, "enabled_plugins": "[rabbitmq_stomp].\n",
		"rabbitmq-env.conf": "", "advanced.config": "[].\n", ".erlang.cookie": "INBOXDTEST" + Suffix()}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(base, name), []byte(body), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	node := "inboxd-test-" + Suffix() + "@localhost"
	b := &PrivateBroker{Addr: addr, t: t, base: base, name: "rabbitmq", node: node}
	b.command = func() (*exec.Cmd, error) {
		cmd := exec.Command(rabbitServer)
		cmd.Dir = base
		cmd.Env = append(os.Environ(),
			"HOME="+base, // the Erlang cookie
			"RABBITMQ_NODENAME="+node,
			"RABBITMQ_CONFIG_FILE="+filepath.Join(base, "rabbitmq"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(base, "enabled_plugins"),
			"RABBITMQ_CONF_ENV_FILE="+filepath.Join(base, "rabbitmq-env.conf"),
			"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(base, "advanced.config"),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(base, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(base, "log"),
			"RABBITMQ_PID_FILE="+filepath.Join(base, "pid"),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(dist),
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-kernel inet_dist_use_interface {127,0,0,1}",
		)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd, nil
	}
	privateRabbits.Store(addr, BrokerEnv{Name: "rabbitmq", Addr: addr, Login: "guest", Passcode: "guest", Host: "/"})
	t.Cleanup(func() { privateRabbits.Delete(addr) })
	t.Cleanup(b.Kill)
	b.Start()
	return b
}

// RunningQueues lists the queues of a private RabbitMQ node (StartPrivateRabbit) whose
// state is running, that is, recovered and routable. A node restarted after a kill -9
// opens its STOMP listener before it has recovered its durable queues, and a message
// published to a topic meanwhile is routed to none of them and dropped (persistent and
// with its receipt, since STOMP publishes without the mandatory flag): seen in CI under
// load, where all 200 messages published right after the restart were lost.
func (b *PrivateBroker) RunningQueues(t testing.TB) []string {
	t.Helper()
	out, err := b.rabbitmqctl(t, "list_queues", "name", "state")
	if err != nil {
		t.Log(err)
		return nil
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[1] == "running" {
			names = append(names, f[0])
		}
	}
	return names
}

// SyncMetadata makes a private RabbitMQ node write its metadata store's log to disk
// (mnesia:sync_log/0), so that a queue declared just before a kill -9 outlives it:
// Mnesia does not sync each transaction, and a subscription declared a few hundred
// milliseconds before the kill is otherwise at the mercy of its buffers.
func (b *PrivateBroker) SyncMetadata(t testing.TB) {
	t.Helper()
	if _, err := b.rabbitmqctl(t, "eval", "mnesia:sync_log()."); err != nil {
		t.Fatal(err)
	}
}

func (b *PrivateBroker) rabbitmqctl(t testing.TB, args ...string) (string, error) {
	t.Helper()
	if b.node == "" {
		t.Fatalf("%s is not a private RabbitMQ node", b)
	}
	return runRabbitmqctl(b.node, b.base, args...)
}
