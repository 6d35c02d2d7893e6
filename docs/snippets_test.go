package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// userModule makes an empty module in a temporary directory that requires inboxd as a
// user's would, with a replace to this tree: the repository's own go.mod requirements
// and go.sum, so that it builds offline from the module cache.
func userModule(t *testing.T) string {
	t.Helper()
	repo, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	gomod := readDoc(t, "go.mod")
	gomod = regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(gomod, "module example.com/user")
	gomod += fmt.Sprintf("\nrequire github.com/inboxd/inboxd v0.0.0\n\nreplace github.com/inboxd/inboxd => %s\n", repo)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// goCmd runs the go command in dir, offline.
func goCmd(dir string, args ...string) *exec.Cmd {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOTOOLCHAIN=local")
	return cmd
}

// fragmentPrelude wraps a snippet that is not a whole file: its statements run in a
// function where the names the guides use are in scope.
const fragmentPrelude = `package %s

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/inboxd/inboxd"
)

var (
	_ = json.Valid
	_ = errors.New
	_ = fmt.Errorf
	_ = os.Exit
	_ = time.Second
)

func _(ctx context.Context, c *inboxd.Client, pool *pgxpool.Pool, tx pgx.Tx, ev inboxd.Event, h inboxd.Handler, logger *slog.Logger) error {
%s
	return nil
}
`

// TestDocsSnippetsCompile builds every Go snippet of the README and the guides in a
// module of a user's own: a whole file as it is, a fragment inside a function that has
// ctx, c, pool, tx, ev, h and logger.
func TestDocsSnippetsCompile(t *testing.T) {
	dir := userModule(t)
	n := 0
	for _, rel := range docFiles(t) {
		blocks, _ := split(readDoc(t, rel))
		for _, b := range blocks {
			if b.lang != "go" {
				continue
			}
			n++
			pkg := fmt.Sprintf("snippet%02d", n)
			src := b.body
			name := "snippet.go"
			if m := regexp.MustCompile(`(?m)^package (\w+)`).FindStringSubmatch(src); m != nil {
				if strings.HasSuffix(m[1], "_test") || strings.Contains(src, "*testing.T") {
					name = "snippet_test.go"
				}
			} else {
				src = fmt.Sprintf(fragmentPrelude, pkg, src)
			}
			d := filepath.Join(dir, pkg)
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(d, "SOURCE"), fmt.Appendf(nil, "%s:%d\n", rel, b.line), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n < 5 {
		t.Fatalf("found only %d Go snippets in the documents", n)
	}
	// go vet type-checks every package, its tests included, and runs nothing.
	out, err := goCmd(dir, "vet", "./...").CombinedOutput()
	if err != nil {
		t.Errorf("the documents' Go snippets do not build: %v\n%s", err, annotate(dir, string(out)))
	}
}

// annotate names, beside each snippet directory in out, the document and line it
// comes from.
func annotate(dir, out string) string {
	return regexp.MustCompile(`snippet\d\d`).ReplaceAllStringFunc(out, func(pkg string) string {
		src, err := os.ReadFile(filepath.Join(dir, pkg, "SOURCE"))
		if err != nil {
			return pkg
		}
		return pkg + " (" + strings.TrimSpace(string(src)) + ")"
	})
}
