// Package docs_test keeps the user documents honest: their Go snippets compile, their
// relative links and anchors resolve, the commands, flags, variables and paths they show
// exist, and the README's library quick start builds and processes an event as shown.
package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository, from this package's directory.
const root = ".."

// userDocs are the documents a user reads; developer material (CONTRIBUTING) is
// checked for links and commands too.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "SECURITY.md", "CONTRIBUTING.md"}
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range guides {
		rel, err := filepath.Rel(root, g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, rel)
	}
	slices.Sort(files)
	return files
}

func readDoc(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// block is a fenced code block of a Markdown document.
type block struct {
	lang string
	body string
	line int    // the line of its opening fence
	head string // the heading it sits under
}

var fenceRE = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")

// split returns a document's fenced code blocks and its prose with the blocks blanked
// out (line numbers kept).
func split(doc string) (blocks []block, prose []string) {
	lines := strings.Split(doc, "\n")
	var cur *block
	var fence, head string
	for i, l := range lines {
		if cur != nil {
			if strings.TrimSpace(l) == fence {
				blocks = append(blocks, *cur)
				cur = nil
			} else {
				cur.body += l + "\n"
			}
			prose = append(prose, "")
			continue
		}
		if m := fenceRE.FindStringSubmatch(l); m != nil {
			cur = &block{lang: m[3], line: i + 1, head: head}
			fence = m[2]
			prose = append(prose, "")
			continue
		}
		if strings.HasPrefix(l, "#") {
			head = strings.TrimSpace(strings.TrimLeft(l, "#"))
		}
		prose = append(prose, l)
	}
	return blocks, prose
}

// anchor is GitHub's anchor for a heading: lower case, punctuation dropped (letters,
// digits, '-' and '_' kept), spaces to '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are a document's heading anchors, with GitHub's -1, -2 suffixes for repeats.
func anchors(doc string) map[string]bool {
	_, prose := split(doc)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range prose {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimLeft(l, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		// Inline code and links keep their text only.
		h = strings.ReplaceAll(h, "`", "")
		h = linkRE.ReplaceAllString(h, "$1")
		a := anchor(h)
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var (
	// commitRE matches a hex word in code that may be a commit; one with no letter
	// a-f (a number such as 8388608) is not.
	commitRE = regexp.MustCompile("`[0-9a-f]{7,40}`")
	linkRE   = regexp.MustCompile(`!?\[([^\]]*)\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	codeRE   = regexp.MustCompile("`[^`]*`")
)

// TestDocsLinks fails on a relative link to a file that does not exist, or to an anchor
// its target does not have.
func TestDocsLinks(t *testing.T) {
	for _, rel := range docFiles(t) {
		doc := readDoc(t, rel)
		_, prose := split(doc)
		for i, l := range prose {
			l = codeRE.ReplaceAllString(l, "")
			for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
				target := m[2]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := rel
				if file != "" {
					path = filepath.Join(filepath.Dir(rel), file)
					if _, err := os.Stat(filepath.Join(root, path)); err != nil {
						t.Errorf("%s:%d: link %q: %s does not exist", rel, i+1, target, path)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into a file that is not Markdown", rel, i+1, target)
					continue
				}
				if !anchors(readDoc(t, path))[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", rel, i+1, target, path, frag)
				}
			}
		}
	}
}

// TestDocsAnchorRules holds anchor to GitHub's rules on headings of these documents.
func TestDocsAnchorRules(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Quick start: library", "quick-start-library"},
		{"Parking: a DEAD event holds its aggregate", "parking-a-dead-event-holds-its-aggregate"},
		{"What happens exactly once, and what may repeat", "what-happens-exactly-once-and-what-may-repeat"},
		{"The REST API and the operator console", "the-rest-api-and-the-operator-console"},
		{"Migrations and the lease", "migrations-and-the-lease"},
		{"snake_case and `code`", "snake_case-and-code"},
	} {
		h := strings.ReplaceAll(c.heading, "`", "")
		if got := anchor(h); got != c.want {
			t.Errorf("anchor(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
	a := anchors("# A\n\n## A\n\n```\n# not a heading\n```\n")
	if !a["a"] || !a["a-1"] || a["not-a-heading"] {
		t.Errorf("anchors: got %v, want a and a-1 only", a)
	}
}

// TestDocsUserDocsHoldNoHistory fails on what does not belong in a user document: an
// issue number, a commit hash, a session, or the history of a measurement.
func TestDocsUserDocsHoldNoHistory(t *testing.T) {
	bad := []struct {
		re   *regexp.Regexp
		what string
	}{
		{regexp.MustCompile(`(?i)\bissues? #?\d+`), "an issue number"},
		{commitRE, "a commit hash"},
		{regexp.MustCompile(`(?i)\b(this|last|previous|next) session\b|session's time|\bthe session\b[^.]*\bmeasured`), "session talk"},
		{regexp.MustCompile(`(?i)previous README|this README's commit|fast phase|slow phase`), "measurement history"},
	}
	for _, rel := range docFiles(t) {
		if rel == "CONTRIBUTING.md" || rel == filepath.Join("docs", "benchmarks.md") {
			continue // developer material; the generated page's header names its commit
		}
		for i, l := range strings.Split(readDoc(t, rel), "\n") {
			for _, b := range bad {
				if m := b.re.FindString(l); m != "" && (b.re != commitRE || strings.ContainsAny(m, "abcdef")) {
					t.Errorf("%s:%d: %s in a user document: %q", rel, i+1, b.what, m)
				}
			}
		}
	}
}

// TestDocsReadmeShape holds the README to a front page: at most 250 lines, none over
// 400 characters, opening with the two set-up commands.
func TestDocsReadmeShape(t *testing.T) {
	readme := readDoc(t, "README.md")
	lines := strings.Split(strings.TrimRight(readme, "\n"), "\n")
	if len(lines) > 250 {
		t.Errorf("README.md has %d lines, want at most 250", len(lines))
	}
	for i, l := range lines {
		if n := len([]rune(l)); n > 400 {
			t.Errorf("README.md:%d: %d characters, want at most 400", i+1, n)
		}
	}
	blocks, _ := split(readme)
	if len(blocks) == 0 || !strings.HasPrefix(blocks[0].body, "make demo") ||
		!strings.Contains(blocks[0].body, "\nmake test") {
		t.Errorf("README.md's first code block must be the set-up commands, make demo then make test")
	}
	if !strings.Contains(readme, "root") {
		t.Errorf("README.md must say that the set-up scripts need root")
	}
	if _, err := os.Stat(filepath.Join(root, "LICENSE")); err != nil {
		t.Errorf("LICENSE: %v", err)
	}
}
