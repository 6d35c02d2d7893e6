package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// exported reads the exported names of the package in dir: its top-level identifiers,
// and "Type.Name" for each exported field and method.
func exported(t *testing.T, dir string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join(root, dir), func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv != nil && len(d.Recv.List) == 1 {
						typ := d.Recv.List[0].Type
						if s, ok := typ.(*ast.StarExpr); ok {
							typ = s.X
						}
						if id, ok := typ.(*ast.Ident); ok {
							names[id.Name+"."+d.Name.Name] = true
						}
						continue
					}
					names[d.Name.Name] = true
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							names[s.Name.Name] = true
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, f := range st.Fields.List {
									for _, n := range f.Names {
										names[s.Name.Name+"."+n.Name] = true
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								names[n.Name] = true
							}
						}
					}
				}
			}
		}
	}
	return names
}

// TestDocsIdentifiersExist fails on a name of the public API that a document shows and
// the package does not export (inboxd.X, inboxdtest.X, inboxdcli.X, Config.X, Client.X,
// Event.X), and on an internal package's configuration presented as a setting: a user
// cannot set it.
func TestDocsIdentifiersExist(t *testing.T) {
	pkgs := map[string]map[string]bool{
		"inboxd":     exported(t, "."),
		"inboxdtest": exported(t, "inboxdtest"),
		"inboxdcli":  exported(t, "cmd/inboxd/inboxdcli"),
	}
	// A name of the API has a lower-case second letter; inboxd.T (a client id's pattern)
	// and Consumer.inboxd.VirtualTopic.x (a queue) are not names.
	qualified := regexp.MustCompile(`(?:^|[^.\w/-])(inboxd|inboxdtest|inboxdcli)\.([A-Z][a-z]\w*)(?:\.([A-Z]\w*))?`)
	member := regexp.MustCompile(`(?:^|[^.\w])(Config|Client|Event|Outgoing|RetryPolicy|CloudEvent)\.([A-Z]\w*)`)
	internal := regexp.MustCompile(`\b(api|process|ingest|outbox|webhook|journal|feed|notifier|stompx|retention|health)\.Config\.[A-Z]\w*`)
	for _, rel := range docFiles(t) {
		if rel == "CONTRIBUTING.md" {
			continue // developer material names internals on purpose
		}
		doc := readDoc(t, rel)
		for _, m := range qualified.FindAllStringSubmatch(doc, -1) {
			m[0] = strings.TrimLeft(m[0], " `(*[")
			names := pkgs[m[1]]
			if !names[m[2]] {
				t.Errorf("%s: %s: package %s exports no %s", rel, m[0], m[1], m[2])
			} else if m[3] != "" && !names[m[2]+"."+m[3]] {
				t.Errorf("%s: %s: %s.%s has no field or method %s", rel, m[0], m[1], m[2], m[3])
			}
		}
		for _, m := range member.FindAllStringSubmatch(doc, -1) {
			if !pkgs["inboxd"][m[1]+"."+m[2]] {
				t.Errorf("%s: %s.%s: inboxd.%s has no field or method %s", rel, m[1], m[2], m[1], m[2])
			}
		}
		for _, m := range internal.FindAllString(doc, -1) {
			t.Errorf("%s: %s: an internal package's setting, which a user cannot set", rel, m)
		}
	}
}

// TestDocsNoGoDocExamples fails where a document says go doc shows the runnable
// Examples: it prints none (pkg.go.dev and go test -run Example do).
func TestDocsNoGoDocExamples(t *testing.T) {
	re := regexp.MustCompile("`go doc[^`]*`[^.]*\\b[Ee]xamples?\\b")
	for _, rel := range docFiles(t) {
		for i, l := range strings.Split(readDoc(t, rel), "\n") {
			if m := re.FindString(l); m != "" && !strings.Contains(m, "no examples") {
				t.Errorf("%s:%d: %q: go doc prints no examples", rel, i+1, m)
			}
		}
	}
}

// TestDocsZeroMeansDefaultInConfig holds the settings table to the library's rule: a
// row where 0 turns a setting off must say that a Config field does so otherwise,
// since a zero Config field takes the default.
func TestDocsZeroMeansDefaultInConfig(t *testing.T) {
	for _, l := range strings.Split(readDoc(t, "docs/configuration.md"), "\n") {
		if strings.HasPrefix(l, "| `INBOXD_") && strings.Contains(l, "(or `0`") && !strings.Contains(l, "inboxd.Config") {
			t.Errorf("docs/configuration.md: a row where 0 means none or forever does not say what a Config field does: %s", l)
		}
	}
}
