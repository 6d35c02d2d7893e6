package sqlcheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// site is one place in the product's source that sends SQL.
type site struct {
	Where string // path:line (function)
	Func  string // path:function, the key of runtimeSites
	SQL   string // the statement, when it is a constant
}

// sqlMethods are the pgx methods that take SQL, with the index of that argument
// (pgx.Batch.Queue queues a statement of a pipelined batch).
var sqlMethods = map[string]int{"Exec": 1, "Query": 1, "QueryRow": 1, "Queue": 0}

// skipDirs hold no product SQL: test helpers, and the benchmark's scratch databases.
var skipDirs = map[string]bool{".git": true, "testdata": true, "vendor": true, "sqlcheck": true, "testenv": true,
	"processtest": true, "sinktest": true, "inboxdtest": true, "node_modules": true}

// harvest reads every non-test Go file under root and returns each call that sends SQL.
// A constant statement (a literal, a named constant, or a concatenation of those,
// passed directly or through a helper's parameter) is returned with its text; anything
// else is returned without, and must be listed in runtimeSites.
func harvest(root string) ([]site, error) {
	var out []site
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if path != root && (skipDirs[d.Name()] || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		sites, err := harvestDir(root, path)
		out = append(out, sites...)
		return err
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Where < out[j].Where })
	return out, err
}

func harvestDir(root, dir string) ([]site, error) {
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	// Package-level string constants and variables, evaluated until nothing changes.
	decls := map[string]ast.Expr{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || (g.Tok != token.CONST && g.Tok != token.VAR) {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						decls[name.Name] = vs.Values[i]
					}
				}
			}
		}
	}
	var eval func(e ast.Expr, depth int) (string, bool)
	eval = func(e ast.Expr, depth int) (string, bool) {
		if depth > 20 {
			return "", false
		}
		switch x := e.(type) {
		case *ast.BasicLit:
			if x.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(x.Value)
			return s, err == nil
		case *ast.ParenExpr:
			return eval(x.X, depth+1)
		case *ast.BinaryExpr:
			if x.Op != token.ADD {
				return "", false
			}
			a, ok1 := eval(x.X, depth+1)
			b, ok2 := eval(x.Y, depth+1)
			return a + b, ok1 && ok2
		case *ast.Ident:
			if v, ok := decls[x.Name]; ok {
				return eval(v, depth+1)
			}
		}
		return "", false
	}
	rel := func(pos token.Pos) (string, int) {
		p := fset.Position(pos)
		r, _ := filepath.Rel(root, p.Filename)
		return filepath.ToSlash(r), p.Line
	}
	type helper struct{ param int }
	helpers := map[string]helper{} // functions that pass one of their parameters to pgx as SQL
	var out []site
	var pending []site
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			params := map[string]int{}
			i := 0
			for _, fld := range fn.Type.Params.List {
				for _, n := range fld.Names {
					params[n.Name] = i
					i++
				}
				if len(fld.Names) == 0 {
					i++
				}
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				arg, isSQL := sqlMethods[sel.Sel.Name]
				if !isSQL || len(call.Args) <= arg {
					return true
				}
				path, line := rel(call.Pos())
				s := site{Where: fmt.Sprintf("%s:%d (%s)", path, line, fn.Name.Name), Func: path[:strings.LastIndex(path, "/")+1] + fn.Name.Name}
				if sql, ok := eval(call.Args[arg], 0); ok {
					s.SQL = sql
					out = append(out, s)
					return true
				}
				if id, ok := call.Args[arg].(*ast.Ident); ok {
					if p, ok := params[id.Name]; ok {
						helpers[fn.Name.Name] = helper{param: p}
						return true
					}
				}
				pending = append(pending, s)
				return true
			})
		}
	}
	// Calls of the helpers, one level deep (transition, countIDs, …).
	for _, f := range files {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				var id *ast.Ident
				switch fun := call.Fun.(type) {
				case *ast.Ident:
					id = fun
				case *ast.SelectorExpr: // a method helper, m.control(…); pgx's own methods were handled above
					if _, isSQL := sqlMethods[fun.Sel.Name]; isSQL {
						return true
					}
					id = fun.Sel
				default:
					return true
				}
				h, ok := helpers[id.Name]
				if !ok || h.param >= len(call.Args) {
					return true
				}
				path, line := rel(call.Pos())
				s := site{Where: fmt.Sprintf("%s:%d (%s via %s)", path, line, fn.Name.Name, id.Name), Func: path[:strings.LastIndex(path, "/")+1] + fn.Name.Name}
				if sql, ok := eval(call.Args[h.param], 0); ok {
					s.SQL = sql
					out = append(out, s)
				} else {
					pending = append(pending, s)
				}
				return true
			})
		}
	}
	return append(out, pending...), nil
}
