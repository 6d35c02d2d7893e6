package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"gopkg.in/yaml.v3"

	"github.com/inboxd/inboxd/internal/metrics"
)

const (
	alertsFile    = "prometheus-alerts.yml"
	dashboardFile = "grafana-dashboard.json"
)

// registered returns every metric inboxd registers, with its variable labels, read
// from the collectors' descriptions (a vector with no series yet is not gathered).
func registered(t *testing.T) map[string][]string {
	t.Helper()
	m := metrics.New()
	out := map[string][]string{}
	descRe := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	add := func(c prometheus.Collector) {
		ch := make(chan *prometheus.Desc, 16)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			g := descRe.FindStringSubmatch(d.String())
			if g == nil {
				t.Fatalf("cannot read %s", d)
			}
			var labels []string
			if g[2] != "" {
				labels = strings.Split(g[2], ",")
			}
			out[g[1]] = labels
		}
	}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		if f := v.Field(i); f.CanInterface() {
			if c, ok := f.Interface().(prometheus.Collector); ok && !f.IsNil() {
				add(c)
			}
		}
	}
	// Gauge functions are not fields, but always have a sample.
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if _, ok := out[f.GetName()]; !ok {
			out[f.GetName()] = nil
		}
	}
	return out
}

// alertExprs reads the rules file's expressions, by alert name.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	return out
}

// dashboardExprs reads every PromQL expression of the dashboard (panel targets, rows'
// panels, template queries), by panel title.
func dashboardExprs(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string  `json:"title"`
		Type    string  `json:"type"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q, query %s: empty", p.Title, tg.RefID)
				}
				out[fmt.Sprintf("panel %q %s", p.Title, tg.RefID)] = tg.Expr
			}
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if strings.HasPrefix(v.Definition, "label_values(") {
			out["variable "+v.Name] = strings.TrimSuffix(strings.TrimPrefix(v.Definition, "label_values("), ")")
		}
	}
	return out
}

var (
	metricRe  = regexp.MustCompile(`\b(inboxd_[a-zA-Z0-9_]+)(\{[^}]*\})?`)
	matcherRe = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	groupRe   = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	// Labels every scraped series has, or that histograms add.
	targetLabels = []string{"instance", "job", "le"}
)

// unknownNames reports the inboxd_* metrics and the labels an expression names that
// inboxd does not register.
func unknownNames(expr string, reg map[string][]string) []string {
	var bad []string
	labels := slices.Clone(targetLabels)
	for _, m := range metricRe.FindAllStringSubmatch(expr, -1) {
		name := m[1]
		if _, ok := reg[name]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, cut := strings.CutSuffix(name, suffix); cut {
					if _, ok := reg[base]; ok {
						name = base
						break
					}
				}
			}
		}
		own, ok := reg[name]
		if !ok {
			bad = append(bad, "metric "+m[1])
			continue
		}
		labels = append(labels, own...)
		for _, lm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			if !slices.Contains(own, lm[1]) && !slices.Contains(targetLabels, lm[1]) {
				bad = append(bad, fmt.Sprintf("label %s of %s", lm[1], name))
			}
		}
	}
	for _, g := range groupRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !slices.Contains(labels, l) {
				bad = append(bad, "grouping label "+l)
			}
		}
	}
	return bad
}

// Issue 22: every metric and label the alerts and the dashboard name must be one inboxd
// registers, or the panel stays empty and the alert never fires.
func TestAlertsAndDashboardNameRealMetrics(t *testing.T) {
	reg := registered(t)
	if len(reg) < 20 {
		t.Fatalf("only %d metrics registered: reading them failed", len(reg))
	}
	// The check itself: a misspelt metric, label or grouping is caught.
	for _, wrong := range []string{`inboxd_dead_event > 0`, `inboxd_stalled{componnt="x"}`, `sum by (reason) (inboxd_dead_events)`} {
		if len(unknownNames(wrong, reg)) == 0 {
			t.Errorf("%q passed the check", wrong)
		}
	}
	exprs := alertExprs(t)
	for k, v := range dashboardExprs(t) {
		exprs[k] = v
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		for _, bad := range unknownNames(expr, reg) {
			t.Errorf("%s: %s is not registered (internal/metrics): %s", where, bad, expr)
		}
		for _, m := range metricRe.FindAllStringSubmatch(expr, -1) {
			used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m[1], "_bucket"), "_sum"), "_count")] = true
		}
	}
	// What the issue asks to cover.
	for _, want := range []string{
		"inboxd_ingest_received_total", "inboxd_process_outcomes_total", "inboxd_stalled", "inboxd_dead_events",
		"inboxd_ingest_quarantined_total", "inboxd_feed_resolved_timestamp_seconds", "inboxd_outbox_unsent",
		"inboxd_outbox_oldest_unsent_age_seconds", "inboxd_parked_aggregates", "inboxd_parked_waiting_events",
	} {
		if !used[want] {
			t.Errorf("neither the alerts nor the dashboard use %s", want)
		}
	}
}

// CI checks the rules, and the dashboard's queries as recording rules, with promtool
// (Debian's prometheus package; scripts/services.sh installs it).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not found: scripts/services.sh up installs it (Debian package prometheus)")
		}
		t.Skip("promtool not installed (apt-get install prometheus)")
	}
	run := func(file string) {
		out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
		if err != nil {
			t.Errorf("promtool check rules %s: %v\n%s", file, err, out)
		}
	}
	run(alertsFile)

	// Grafana's variables, as Grafana would fill them in.
	grafana := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	var keys []string
	exprs := dashboardExprs(t)
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if strings.HasPrefix(k, "variable ") {
			continue
		}
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: grafana.Replace(exprs[k])})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	run(file)
}
