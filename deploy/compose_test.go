// Package deploy_test checks docker-compose.yml, which cannot be run here (no Docker):
// pinned images, consistent dependencies, the CockroachDB init job, the webhook sink,
// and host ports.
package deploy_test

import (
	"encoding/xml"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/internal/feed"
)

type service struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Hostname    string            `yaml:"hostname"`
	Profiles    []string          `yaml:"profiles"`
	Entrypoint  any               `yaml:"entrypoint"`
	Command     any               `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   yaml.Node         `yaml:"depends_on"`
	Networks    yaml.Node         `yaml:"networks"`
}

type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

func load(t *testing.T) compose {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("parsing docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("no services")
	}
	return c
}

func dependsOn(t *testing.T, s service) []string {
	t.Helper()
	switch s.DependsOn.Kind {
	case 0:
		return nil
	case yaml.SequenceNode:
		var names []string
		if err := s.DependsOn.Decode(&names); err != nil {
			t.Fatal(err)
		}
		return names
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		if err := s.DependsOn.Decode(&m); err != nil {
			t.Fatal(err)
		}
		var names []string
		for n, d := range m {
			switch d.Condition {
			case "", "service_started", "service_healthy", "service_completed_successfully":
			default:
				t.Errorf("depends_on %s: unknown condition %q", n, d.Condition)
			}
			names = append(names, n)
		}
		sort.Strings(names)
		return names
	}
	t.Fatalf("depends_on of unexpected kind %v", s.DependsOn.Kind)
	return nil
}

func TestImagesPinned(t *testing.T) {
	for name, s := range load(t).Services {
		if s.Image == "" {
			if s.Build == nil {
				t.Errorf("%s: neither image nor build", name)
			}
			continue
		}
		ref := s.Image
		if i := strings.Index(ref, "@sha256:"); i >= 0 {
			continue // a digest pins whatever the tag says
		}
		slash := strings.LastIndex(ref, "/")
		colon := strings.LastIndex(ref, ":")
		if colon <= slash {
			t.Errorf("%s: image %q has no tag", name, ref)
			continue
		}
		if tag := ref[colon+1:]; tag == "latest" || tag == "" {
			t.Errorf("%s: image %q is not pinned", name, ref)
		}
	}
}

func TestDependenciesExist(t *testing.T) {
	c := load(t)
	for name, s := range c.Services {
		for _, dep := range dependsOn(t, s) {
			d, ok := c.Services[dep]
			if !ok {
				t.Errorf("%s depends on unknown service %q", name, dep)
				continue
			}
			// A dependency limited to profiles the dependant is not in would break "up".
			if len(d.Profiles) > 0 && !slices.ContainsFunc(s.Profiles, func(p string) bool { return slices.Contains(d.Profiles, p) }) {
				t.Errorf("%s depends on %s, which only runs with profiles %v", name, dep, d.Profiles)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
				if _, err := os.Stat(filepath.Join("..", src)); err != nil {
					t.Errorf("%s mounts missing file %s", name, src)
				}
			} else if _, ok := c.Volumes[src]; !ok {
				t.Errorf("%s uses undeclared volume %s", name, src)
			}
		}
	}
}

func TestCockroachInitJob(t *testing.T) {
	c := load(t)
	init, ok := c.Services["crdb-init"]
	if !ok {
		t.Fatal("no crdb-init service")
	}
	if !strings.HasPrefix(init.Image, "cockroachdb/cockroach:") {
		t.Errorf("crdb-init image %q", init.Image)
	}
	var script string
	for _, v := range init.Volumes {
		if src, _, _ := strings.Cut(v, ":"); strings.HasSuffix(src, ".sh") {
			b, err := os.ReadFile(filepath.Join("..", src))
			if err != nil {
				t.Fatal(err)
			}
			script = string(b)
		}
	}
	for _, want := range []string{"cockroach\" init", "SET CLUSTER SETTING kv.rangefeed.enabled = true", "CREATE DATABASE IF NOT EXISTS"} {
		if !strings.Contains(script, want) && !strings.Contains(strings.ReplaceAll(script, "$crdb", "cockroach"), want) {
			t.Errorf("init script does not contain %q", want)
		}
	}
	// Both topologies are reachable as "crdb" and one of each exists.
	single := 0
	for name, s := range c.Services {
		if strings.HasPrefix(s.Image, "cockroachdb/cockroach:") && name != "crdb-init" {
			if !strings.Contains(nodeString(s.Networks), "crdb") {
				t.Errorf("%s has no crdb network alias", name)
			}
			if strings.Contains(commandString(s.Command), "start-single-node") {
				single++
				if !slices.Equal(s.Profiles, []string{"single"}) {
					t.Errorf("%s: single node must be in profile single, is in %v", name, s.Profiles)
				}
			} else if !slices.Equal(s.Profiles, []string{"cluster"}) {
				t.Errorf("%s: cluster node must be in profile cluster, is in %v", name, s.Profiles)
			}
		}
	}
	if single != 1 {
		t.Errorf("%d single-node services, want 1", single)
	}
}

func TestWebhookSink(t *testing.T) {
	c := load(t)
	found := false
	for name, s := range c.Services {
		u, ok := s.Environment["INBOXD_WEBHOOK_URL"]
		if !ok {
			continue
		}
		found = true
		sink, err := feed.ParseSinkURL(u)
		if err != nil {
			t.Errorf("%s: INBOXD_WEBHOOK_URL: %v", name, err)
			continue
		}
		host, port, _ := strings.Cut(sink.Host, ":")
		target, ok := c.Services[host]
		if !ok || target.Hostname != host {
			t.Errorf("%s: webhook host %q is not a service with that hostname (the certificate SAN)", name, host)
			continue
		}
		if !slices.ContainsFunc(target.Ports, func(p string) bool { return strings.HasSuffix(p, ":"+port) }) &&
			!strings.HasSuffix(target.Environment["INBOXD_WEBHOOK_ADDR"], ":"+port) {
			t.Errorf("%s: webhook port %s is not what %s listens on", name, port, host)
		}
	}
	if !found {
		t.Fatal("no service sets INBOXD_WEBHOOK_URL")
	}
}

// Host ports must be unique among the services that run together: those without a
// profile plus those of one profile.
func TestPortsUnique(t *testing.T) {
	c := load(t)
	profiles := map[string]bool{}
	for _, s := range c.Services {
		for _, p := range s.Profiles {
			profiles[p] = true
		}
	}
	for profile := range profiles {
		seen := map[string]string{}
		for name, s := range c.Services {
			if len(s.Profiles) > 0 && !slices.Contains(s.Profiles, profile) {
				continue
			}
			for _, p := range s.Ports {
				parts := strings.Split(p, ":")
				if len(parts) < 2 {
					t.Errorf("%s: port %q publishes a random host port; pin it", name, p)
					continue
				}
				host := strings.Join(parts[:len(parts)-1], ":")
				if other, dup := seen[host]; dup {
					t.Errorf("profile %s: host port %s used by %s and %s", profile, host, other, name)
				}
				seen[host] = name
			}
		}
	}
}

func nodeString(n yaml.Node) string {
	b, _ := yaml.Marshal(&n)
	return string(b)
}

func commandString(v any) string {
	switch c := v.(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, p := range c {
			if s, ok := p.(string); ok {
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// Issue 10: the compose file fell back to the known tokens change-me-admin-token and
// change-me-webhook-token. A secret may have no default but empty (generated, or
// closed), or be required with ${VAR:?message}.
func TestNoKnownSecrets(t *testing.T) {
	c := load(t)
	secret := func(name string) bool {
		for _, s := range []string{"TOKEN", "PASSCODE", "PASSWORD", "SECRET", "KEY"} {
			if strings.Contains(name, s) {
				return true
			}
		}
		return false
	}
	checked := 0
	for svcName, svc := range c.Services {
		for name, value := range svc.Environment {
			if !secret(name) || strings.HasSuffix(name, "_FILE") {
				continue
			}
			checked++
			v := strings.TrimSpace(value)
			switch {
			case v == "${"+name+":-}", v == "${"+name+"}":
			case strings.HasPrefix(v, "${"+name+":?") && strings.HasSuffix(v, "}"):
			default:
				t.Errorf("%s: %s = %q: a secret must be ${%s:-} (empty: generated or closed) or ${%s:?message} (required)", svcName, name, value, name, name)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no secret settings found")
	}
	inboxd := c.Services["inboxd"]
	if v := inboxd.Environment["INBOXD_ADMIN_TOKEN"]; !strings.HasPrefix(v, "${INBOXD_ADMIN_TOKEN:?") {
		t.Errorf("INBOXD_ADMIN_TOKEN = %q: must be required, the API is reached through Docker's NAT", v)
	}
	// The feed job reads the generated webhook token from the volume serve writes.
	feedJob := c.Services["inboxd-feed"]
	shared := false
	for _, v := range feedJob.Volumes {
		for _, w := range inboxd.Volumes {
			if strings.SplitN(v, ":", 2)[0] == strings.SplitN(w, ":", 2)[0] && strings.Contains(v, inboxd.Environment["INBOXD_CERT_DIR"]) {
				shared = true
			}
		}
	}
	if !shared {
		t.Error("inboxd-feed does not mount inboxd's certificate volume, where the webhook token is generated")
	}
}

// TestFitsLicenseThrottle: an unlicensed multi-node cluster allows 5 open user
// transactions per gateway node, implicit ones included, 7 days after init
// (pkg/server/license/enforcer.go; docs licensing-faqs). Issue 19: the old sum counted
// the sweeper twice and left out the outbox relay, the webhook's watermark, health
// checks, the API and console, and the changefeed job; it claimed 5 where inboxd can
// hold 9 or more. The header of docker-compose.yml must state the sum this model computes from
// its settings, and since that is over 5, offer the way out: the single profile, or a
// licence key that crdb-init sets.
func TestFitsLicenseThrottle(t *testing.T) {
	c := load(t)
	s := c.Services["inboxd"]
	num := func(key string) int {
		v := s.Environment[key]
		// ${VAR:-default}: the default is what runs unless the user overrides it.
		if i := strings.Index(v, ":-"); i >= 0 && strings.HasSuffix(v, "}") {
			v = v[i+2 : len(v)-1]
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s = %q: want a positive number (unset, the default is the number of CPUs)", key, s.Environment[key])
		}
		return n
	}
	dest := s.Environment["INBOXD_DESTINATION"]
	if i := strings.Index(dest, ":-"); i >= 0 && strings.HasSuffix(dest, "}") {
		dest = dest[i+2 : len(dest)-1]
	}
	// Each part holds at most one connection, and so one transaction, at a time.
	parts := map[string]int{
		"processing (process.Engine's semaphore, shared by sweeper and webhook)": num("INBOXD_CONCURRENCY"),
		"ingest commits in flight, per destination":                              num("INBOXD_COMMITS_IN_FLIGHT") * len(strings.Split(dest, ",")),
		"outbox relay":                                  1,
		"webhook pending lookup and watermark":          1,
		"sweeper's DEAD gauge":                          1,
		"health checks":                                 1,
		"API and console, at least":                     1,
		"inboxd-feed (changefeed create) while serving": 1,
	}
	sum := 0
	for _, n := range parts {
		sum += n
	}
	raw, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`may hold (\d+) open transactions`).FindSubmatch(raw)
	if m == nil || string(m[1]) != strconv.Itoa(sum) {
		t.Fatalf("docker-compose.yml states %q; the settings give %d open transactions at once (%v)", m, sum, parts)
	}
	if sum <= 5 {
		return
	}
	if !strings.Contains(string(raw), "--profile single") || !strings.Contains(string(raw), "recommended") {
		t.Error("over 5 transactions, docker-compose.yml must recommend the single profile")
	}
	init := c.Services["crdb-init"]
	if init.Environment["CRDB_LICENSE_KEY"] != "${CRDB_LICENSE_KEY:-}" {
		t.Errorf("crdb-init does not take CRDB_LICENSE_KEY: %q", init.Environment["CRDB_LICENSE_KEY"])
	}
	script, err := os.ReadFile(filepath.Join("crdb-init.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(script), "SET CLUSTER SETTING enterprise.license") {
		t.Error("crdb-init.sh does not set the licence key")
	}
}

// Issue 19: every port was published on all interfaces, an --insecure CockroachDB and
// an unauthenticated broker included. The local stack is this machine's only.
func TestPortsLoopbackOnly(t *testing.T) {
	for name, s := range load(t).Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") || strings.Count(p, ":") != 2 {
				t.Errorf("%s publishes %q: want 127.0.0.1:HOST:CONTAINER", name, p)
			}
		}
	}
}

// Issue 19: the compose broker had no authentication, so anyone who reached it could
// take events before inboxd saw them. Its activemq.xml must refuse anonymous
// connections and know one user, whose login and passcode come from the same compose
// variables inboxd logs in with, the passcode required.
func TestBrokerRequiresLogin(t *testing.T) {
	c := load(t)
	broker := c.Services["activemq"]
	var conf string
	for _, v := range broker.Volumes {
		if src, dst, _ := strings.Cut(v, ":"); strings.HasSuffix(dst, "conf/activemq.xml:ro") || strings.HasSuffix(dst, "conf/activemq.xml") {
			conf = src
		}
	}
	if conf == "" {
		t.Fatal("the broker does not mount an activemq.xml of ours")
	}
	raw, err := os.ReadFile(filepath.Join("..", conf))
	if err != nil {
		t.Fatal(err)
	}
	var beans struct {
		Broker struct {
			Plugins struct {
				Simple []struct {
					Anonymous string `xml:"anonymousAccessAllowed,attr"`
					Users     []struct {
						Username string `xml:"username,attr"`
						Password string `xml:"password,attr"`
					} `xml:"users>authenticationUser"`
				} `xml:"simpleAuthenticationPlugin"`
				JAAS []struct{} `xml:"jaasAuthenticationPlugin"`
			} `xml:"plugins"`
		} `xml:"broker"`
	}
	if err := xml.Unmarshal(raw, &beans); err != nil {
		t.Fatalf("%s: %v", conf, err)
	}
	plugins := beans.Broker.Plugins
	if len(plugins.Simple) != 1 || len(plugins.JAAS) != 0 {
		t.Fatalf("%s: want one simpleAuthenticationPlugin, have %d (and %d JAAS)", conf, len(plugins.Simple), len(plugins.JAAS))
	}
	auth := plugins.Simple[0]
	if auth.Anonymous == "true" {
		t.Error("anonymous access allowed")
	}
	if len(auth.Users) != 1 {
		t.Fatalf("want exactly one broker user, have %d", len(auth.Users))
	}
	placeholder := regexp.MustCompile(`^\$\{([A-Z_]+)\}$`)
	inboxd := c.Services["inboxd"]
	for attr, want := range map[string]string{auth.Users[0].Username: "INBOXD_STOMP_LOGIN", auth.Users[0].Password: "INBOXD_STOMP_PASSCODE"} {
		m := placeholder.FindStringSubmatch(attr)
		if m == nil || m[1] != want {
			t.Errorf("broker user attribute %q: want ${%s}, from the environment, never a literal", attr, want)
			continue
		}
		if bv, iv := broker.Environment[want], inboxd.Environment[want]; bv == "" || bv != iv {
			t.Errorf("%s: broker gets %q, inboxd %q; want one compose variable for both", want, bv, iv)
		}
	}
	if v := inboxd.Environment["INBOXD_STOMP_PASSCODE"]; !strings.HasPrefix(v, "${INBOXD_STOMP_PASSCODE:?") {
		t.Errorf("INBOXD_STOMP_PASSCODE = %q: must be required (no default, not empty)", v)
	}
}
