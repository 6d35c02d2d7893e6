package config

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/inboxd/inboxd"
	"github.com/inboxd/inboxd/internal/defaults"
)

// statedDefault is the value a field's doc gives after "Defaults to ", up to the
// sentence's full stop.
var statedDefault = regexp.MustCompile(`Defaults to (.+?)(?:\.\s|\.$|[:;,]\s)`)

// computedDefaults are the defaults no literal can state.
var computedDefaults = map[string]string{"Concurrency": "the number of CPUs, at least 2"}

// configDocs reads the doc comment of each field of inboxd.Config from config.go.
func configDocs(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../config.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "Config" {
			return true
		}
		for _, fld := range ts.Type.(*ast.StructType).Fields.List {
			for _, name := range fld.Names {
				docs[name.Name] = strings.Join(strings.Fields(fld.Doc.Text()), " ")
			}
		}
		return false
	})
	return docs
}

// literal writes a default as a field's doc states it: a duration as an operator
// would ("10m"), a string or list quoted.
func literal(v reflect.Value) string {
	switch x := v.Interface().(type) {
	case time.Duration:
		return short(x)
	case string:
		return strconv.Quote(x)
	case []string:
		return strconv.Quote(strings.Join(x, ","))
	}
	return fmt.Sprint(v.Interface())
}

// TestConfigDocs holds inboxd.Config's docs to the one table: every field says what it
// does and "Defaults to X.", X being what WithDefaults gives it (internal/defaults),
// and each field the command line sets names its environment variable.
func TestConfigDocs(t *testing.T) {
	docs := configDocs(t)
	def := reflect.ValueOf(inboxd.Config{}.WithDefaults())
	typ := def.Type()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		doc := docs[name]
		if !strings.HasPrefix(doc, name+" ") {
			t.Errorf("Config.%s: no doc of its own starting with its name: %q", name, doc)
			continue
		}
		m := statedDefault.FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("Config.%s: its doc states no default (\"Defaults to X.\")", name)
			continue
		}
		stated, v := m[1], def.Field(i)
		switch {
		case computedDefaults[name] != "":
			if !strings.Contains(doc, "Defaults to "+computedDefaults[name]+".") {
				t.Errorf("Config.%s: doc does not say it defaults to %s", name, computedDefaults[name])
			}
		case v.IsZero():
			// A zero default is stated in words ("none: the system pool", "false").
			if stated != "false" && strings.ContainsAny(stated[:1], `"0123456789`) {
				t.Errorf("Config.%s: doc says it defaults to %s, but its default is zero", name, stated)
			}
		case stated != literal(v):
			t.Errorf("Config.%s: doc says it defaults to %s, the table says %s", name, stated, literal(v))
		}
	}
	for field, env := range settingFields(t) {
		if !strings.Contains(docs[field], env) {
			t.Errorf("Config.%s: its doc does not name its environment variable %s", field, env)
		}
	}
}

// settingFields maps each command-line setting that sets an inboxd.Config field to
// that field's name, found by setting it to a probe value and seeing what changed: the
// field its row names (defaults.Setting.Field).
func settingFields(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	base := Defaults()
	for i, s := range settings(&Config{}) {
		for _, probe := range []string{"7", "7s", "true", "/queue/probe-7", "x"} {
			c := Defaults()
			if settings(c)[i].set(probe) != nil {
				continue
			}
			c.toLibrary()
			a, b := reflect.ValueOf(base.Config), reflect.ValueOf(c.Config)
			for j := range a.NumField() {
				if f := a.Type().Field(j); f.IsExported() && !reflect.DeepEqual(a.Field(j).Interface(), b.Field(j).Interface()) &&
					!strings.HasPrefix(f.Name, "Disable") {
					out[f.Name] = s.env
					if f.Name != s.Field {
						t.Errorf("%s sets Config.%s, its row names %s", s.env, f.Name, s.Field)
					}
				}
			}
			break
		}
	}
	if len(out) < 40 {
		t.Fatalf("found the fields of only %d settings", len(out))
	}
	return out
}

var update = flag.Bool("update", false, "rewrite docs/configuration.md's table from the settings")

// docs/configuration.md's table lies between these lines.
const (
	tableStart = "<!-- Generated from internal/config's settings: go test ./internal/config -run TestConfigTable -update -->"
	tableEnd   = "<!-- End of the generated configuration table. -->"
)

// readmeTable writes docs/configuration.md's table from the settings: a row per
// setting (or per group, defaults.SharesRowAbove), its default as the flag shows it unless the
// row states its own.
func readmeTable(t *testing.T) string {
	t.Helper()
	type line struct {
		envs, defs   []string
		def, meaning string
	}
	var lines []*line
	for _, s := range settings(&Config{}) {
		cell := "empty"
		if s.def != "" {
			cell = "`" + s.def + "`"
		}
		if s.README == defaults.SharesRowAbove {
			if len(lines) == 0 {
				t.Fatalf("%s shares the row above, and there is none", s.env)
			}
			l := lines[len(lines)-1]
			l.envs = append(l.envs, s.env)
			if !slices.Contains(l.defs, cell) {
				l.defs = append(l.defs, cell)
			}
			continue
		}
		l := &line{envs: []string{s.env}, defs: []string{cell}, meaning: s.README}
		if def, meaning, ok := strings.Cut(s.README, " | "); ok {
			l.def, l.meaning = def, meaning
		}
		if l.meaning == "" {
			t.Fatalf("%s: no README text", s.env)
		}
		lines = append(lines, l)
	}
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	for _, l := range lines {
		def := l.def
		if def == "" {
			def = strings.Join(l.defs, ", ")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", strings.Join(l.envs, "`, `"), def, l.meaning)
	}
	return b.String()
}

// TestConfigTable holds docs/configuration.md's table to the settings, which
// write it: with -update it rewrites the table, without it fails when they differ.
func TestConfigTable(t *testing.T) {
	const path = "../../docs/configuration.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	before, rest, ok1 := strings.Cut(readme, tableStart+"\n")
	_, after, ok2 := strings.Cut(rest, tableEnd)
	if !ok1 || !ok2 {
		t.Fatalf("docs/configuration.md: the configuration table's markers are missing: %q, then %q", tableStart, tableEnd)
	}
	want := before + tableStart + "\n" + readmeTable(t) + tableEnd + after
	if want == readme {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote the configuration table of %s", path)
		return
	}
	t.Errorf("docs/configuration.md's configuration table differs from the settings (internal/config); " +
		"run go test ./internal/config -run TestConfigTable -update")
}
