package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// snippets are the places a document shows a command: its shell code blocks, line by
// line, and its inline code spans.
func commandSnippets(t *testing.T, rel string) []string {
	t.Helper()
	blocks, prose := split(readDoc(t, rel))
	var out []string
	for _, b := range blocks {
		if b.lang == "go" || b.lang == "xml" || b.lang == "json" || b.lang == "yaml" {
			continue
		}
		for _, l := range strings.Split(b.body, "\n") {
			if c, _, ok := strings.Cut(l, " #"); ok {
				l = c
			}
			out = append(out, l)
		}
	}
	for _, l := range prose {
		for _, m := range codeRE.FindAllString(l, -1) {
			out = append(out, strings.Trim(m, "`"))
		}
	}
	return out
}

var (
	makeRE   = regexp.MustCompile(`(?:^|[\s;&(])make ([a-z][a-z0-9-]*)`)
	inboxdRE = regexp.MustCompile(`(?:^|[\s;&(/])inboxd ((?:[a-z][a-z-]*)(?: [a-z][a-z-]*)?)((?: [^|;&#]*)?)`)
	flagRE   = regexp.MustCompile(`(?:^|\s)-([a-z][a-z0-9-]*)`)
	envRE    = regexp.MustCompile(`\bINBOXD_[A-Z0-9_]*[A-Z0-9]\b`)
	// A path in the repository: a top-level directory of it, then more.
	pathRE = regexp.MustCompile(`^(?:\./)?((?:internal|cmd|scripts|deploy|schema|examples|docs|inboxdtest|\.ci)/[A-Za-z0-9_./*-]*|docker-compose\.yml|RELEASES|Makefile|go\.mod)$`)
)

// TestDocsMakeTargets fails on a `make X` a document shows that the Makefile lacks.
func TestDocsMakeTargets(t *testing.T) {
	mk := readDoc(t, "Makefile")
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9 -]*):`).FindAllStringSubmatch(mk, -1) {
		for _, name := range strings.Fields(m[1]) {
			targets[name] = true
		}
	}
	for _, rel := range docFiles(t) {
		for _, s := range commandSnippets(t, rel) {
			for _, m := range makeRE.FindAllStringSubmatch(s, -1) {
				if !targets[m[1]] {
					t.Errorf("%s: `make %s`: the Makefile has no target %s", rel, m[1], m[1])
				}
			}
		}
	}
}

// inboxdBinary builds cmd/inboxd into the test's temporary directory.
func inboxdBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "inboxd")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/inboxd").CombinedOutput(); err != nil {
		t.Fatalf("building cmd/inboxd: %v\n%s", err, out)
	}
	return bin
}

// help runs `inboxd args... -h` and returns what it prints.
func help(bin string, args ...string) string {
	cmd := exec.Command(bin, append(slices.Clone(args), "-h")...)
	cmd.Env = append(os.Environ(), "INBOXD_LOG_LEVEL=error")
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// subcommands reads `inboxd -h`'s list of commands, each with its actions (the
// "create|status|…" its description ends with), if any.
func subcommands(t *testing.T, bin string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	_, list, ok := strings.Cut(help(bin), "Commands:")
	if !ok {
		t.Fatalf("inboxd -h lists no commands")
	}
	for _, m := range regexp.MustCompile(`(?m)^  ([a-z][a-z-]*)\s+(.*)$`).FindAllStringSubmatch(list, -1) {
		var actions []string
		if a := regexp.MustCompile(`: ([a-z]+(?:\|[a-z]+)+)\s*$`).FindStringSubmatch(m[2]); a != nil {
			actions = strings.Split(a[1], "|")
		}
		out[m[1]] = actions
	}
	if len(out) < 5 {
		t.Fatalf("inboxd -h lists only %d commands", len(out))
	}
	return out
}

var helpFlagRE = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)

// TestDocsInboxdCommands fails on an `inboxd` subcommand, action or flag a document
// shows that the binary does not know (its -h lists them).
func TestDocsInboxdCommands(t *testing.T) {
	bin := inboxdBinary(t)
	subs := subcommands(t, bin)
	flagsOf := map[string]map[string]bool{}
	checked := 0
	for _, rel := range docFiles(t) {
		if rel == "CHANGELOG.md" {
			continue // it names what changed, as it was then
		}
		for _, s := range commandSnippets(t, rel) {
			for _, m := range inboxdRE.FindAllStringSubmatch(s, -1) {
				words := strings.Fields(m[1])
				actions, ok := subs[words[0]]
				if !ok {
					if looksLikeCommand(s, m[0]) {
						t.Errorf("%s: `%s`: inboxd has no command %q", rel, strings.TrimSpace(m[0]), words[0])
					}
					continue
				}
				args := words[:1]
				if len(actions) > 0 && len(words) == 2 {
					if !slices.Contains(actions, words[1]) {
						t.Errorf("%s: `%s`: inboxd %s has no action %q (%s)", rel, strings.TrimSpace(m[0]), words[0], words[1], strings.Join(actions, "|"))
						continue
					}
					args = words
				}
				key := strings.Join(args, " ")
				flags, ok := flagsOf[key]
				if !ok {
					flags = map[string]bool{}
					for _, f := range helpFlagRE.FindAllStringSubmatch(help(bin, args...), -1) {
						flags[f[1]] = true
					}
					flagsOf[key] = flags
				}
				checked++
				for _, f := range flagRE.FindAllStringSubmatch(m[2], -1) {
					if f[1] == "h" || f[1] == "help" {
						continue
					}
					if !flags[f[1]] {
						t.Errorf("%s: `%s`: inboxd %s has no flag -%s", rel, strings.TrimSpace(m[0]), key, f[1])
					}
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d inboxd commands in the documents", checked)
	}
}

// looksLikeCommand tells a shown command from prose that names the binary ("inboxd
// journals it once"): a command sits at the start of its snippet or after a prompt.
func looksLikeCommand(snippet, match string) bool {
	s := strings.TrimSpace(snippet)
	m := strings.TrimLeft(match, " ;&(/")
	return strings.HasPrefix(s, m) || strings.HasPrefix(s, "$ "+m)
}

// TestDocsEnvironmentVariables fails on an INBOXD_* variable a document shows that no
// setting, test helper or script reads.
func TestDocsEnvironmentVariables(t *testing.T) {
	known := map[string]bool{}
	for _, m := range envRE.FindAllString(readDoc(t, "docs/configuration.md"), -1) {
		known[m] = true
	}
	// Variables of tests and scripts: named in their source.
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "docs" && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".sh") ||
			d.Name() == "Makefile" || d.Name() == "run" || strings.HasSuffix(path, ".yml")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range envRE.FindAllString(string(b), -1) {
			known[m] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range docFiles(t) {
		if rel == "CHANGELOG.md" {
			continue
		}
		for _, m := range envRE.FindAllString(readDoc(t, rel), -1) {
			if !known[m] {
				t.Errorf("%s: %s: no setting, test or script reads it", rel, m)
			}
		}
	}
}

// TestDocsRepositoryPaths fails on a path into the repository that a document shows
// in code and that does not exist.
func TestDocsRepositoryPaths(t *testing.T) {
	checked := 0
	for _, rel := range docFiles(t) {
		if rel == "CHANGELOG.md" {
			continue
		}
		for _, s := range commandSnippets(t, rel) {
			for _, word := range strings.Fields(s) {
				word = strings.TrimRight(strings.Trim(word, `"'(),;`), ".:")
				m := pathRE.FindStringSubmatch(word)
				if m == nil {
					continue
				}
				checked++
				if !repoPathExists(m[1]) {
					t.Errorf("%s: `%s`: no such path in the repository", rel, word)
				}
			}
		}
	}
	if checked < 10 {
		t.Errorf("checked only %d repository paths in the documents", checked)
	}
}

// repoPathExists is true for a file or directory, a glob that matches one, or a Go
// package path followed by one of its names (internal/webhook/sinktest.Feed).
func repoPathExists(p string) bool {
	p = strings.TrimSuffix(p, "/...")
	if strings.Contains(p, "*") {
		m, _ := filepath.Glob(filepath.Join(root, p))
		return len(m) > 0
	}
	if _, err := os.Stat(filepath.Join(root, p)); err == nil {
		return true
	}
	if dir, _, ok := strings.Cut(filepath.Base(p), "."); ok {
		if st, err := os.Stat(filepath.Join(root, filepath.Dir(p), dir)); err == nil && st.IsDir() {
			return true
		}
	}
	return false
}

// TestMakeUpNamesAProfile fails when `make up` runs docker compose without a profile:
// every database in docker-compose.yml belongs to a profile, so none would start.
func TestMakeUpNamesAProfile(t *testing.T) {
	mk := readDoc(t, "Makefile")
	for _, line := range strings.Split(mk, "\n") {
		if strings.Contains(line, "docker compose") && strings.Contains(line, " up") && !strings.Contains(line, "--profile") {
			t.Errorf("Makefile: %q starts no database: name a profile (docker-compose.yml)", strings.TrimSpace(line))
		}
	}
}

// TestScriptsDefaultToBuiltBinary fails when a script's default inboxd binary is not the
// one `make build` writes.
func TestScriptsDefaultToBuiltBinary(t *testing.T) {
	dir := filepath.Join(root, "scripts")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	def := regexp.MustCompile(`INBOXD:-([^}]*)\}`)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range def.FindAllStringSubmatch(string(b), -1) {
			if m[1] != "bin/inboxd" {
				t.Errorf("scripts/%s: INBOXD defaults to %s; make build writes bin/inboxd", e.Name(), m[1])
			}
		}
	}
}
