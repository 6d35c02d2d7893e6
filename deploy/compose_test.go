// Package deploy_test checks docker-compose.yml, which cannot be run here (no Docker):
// pinned images, consistent dependencies, the CockroachDB init job, the webhook sink,
// and host ports.
package deploy_test

import (
	"os"
	"path/filepath"
	"slices"
	"sort"
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

// TestFitsLicenseThrottle: an unlicensed multi-node cluster is throttled to 5 concurrent
// transactions 7 days after init (https://www.cockroachlabs.com/docs/stable/licensing-faqs).
// inboxd's transactions at once: processing workers, ingest batches in flight, the
// sweeper's claim, and one for the API and retention.
func TestFitsLicenseThrottle(t *testing.T) {
	c := load(t)
	s := c.Services["inboxd"]
	num := func(key string) int {
		v := s.Environment[key]
		// ${VAR:-default}: the default is what runs unless the user overrides it.
		if i := strings.Index(v, ":-"); i >= 0 && strings.HasSuffix(v, "}") {
			v = v[i+2 : len(v)-1]
		}
		var n int
		for _, r := range v {
			if r < '0' || r > '9' {
				t.Fatalf("%s = %q: want a number", key, s.Environment[key])
			}
			n = n*10 + int(r-'0')
		}
		if v == "" {
			t.Fatalf("%s is not set: the default (8 workers) does not fit 5 transactions", key)
		}
		return n
	}
	if total := num("INBOXD_CONCURRENCY") + num("INBOXD_COMMITS_IN_FLIGHT") + 2; total > 5 {
		t.Errorf("inboxd may run %d transactions at once; a throttled cluster allows 5", total)
	}
}
