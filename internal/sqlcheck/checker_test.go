package sqlcheck

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/parser"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/sem/tree"
	"github.com/cockroachdb/cockroachdb-parser/pkg/sql/types"
)

// checker parses statements with CockroachDB 25.2's parser and type-checks every
// expression holding a placeholder. pgx prepares a statement without parameter types
// (it sends no OIDs), so CockroachDB infers each placeholder's type from its context
// alone, which is what this reproduces: untyped placeholders shared by the whole
// statement, and a statement fails when one stays undetermined.
//
// The parser module ships no catalog and no builtin functions, so the checker stands in
// for both: a column reference becomes a value of the column's type (read from the
// migrations' CREATE TABLE statements, plus the CTE columns in extraColumns), and a
// function call becomes a value of its return type (funcReturns) after its arguments
// have been type-checked on their own.
type checker struct {
	cols map[string]*types.T
}

// extraColumns are the columns that CTEs and aliases in inboxd's statements define.
var extraColumns = map[string]*types.T{
	"raw": types.String, "ord": types.Int, "seq": types.Int, "conflict_id": types.Uuid,
	"found_here": types.Bool, "rn": types.Int, "first_seq": types.Int, "n": types.Int, "u": types.Uuid,
	"skip": types.Bool, "skipped_by": types.String, "backoff_ms": types.Int, "duration_ms": types.Int, "err": types.String, "runs": types.Int,
	"pid": types.Uuid, "pseq": types.Int, "pdue": types.TimestampTZ, "pstatus": types.String,
	"did": types.Uuid, "dseq": types.Int, "ddue": types.TimestampTZ, "parked": types.Bool,
}

// funcReturns are the return types of the functions inboxd calls; "" means the type of
// the first argument (max, min). unnest appears in FROM only, where the type of its
// result does not matter; its arguments are what gets checked.
var funcReturns = map[string]*types.T{
	"now": types.TimestampTZ, "clock_timestamp": types.TimestampTZ, "nextval": types.Int, "count": types.Int,
	"octet_length": types.Int, "length": types.Int, "convert_to": types.Bytes, "row_to_json": types.Jsonb,
	"version": types.String, "max": nil, "min": nil, "timezone": types.Timestamp, "setval": types.Int,
	"jsonb_build_object": types.Jsonb, "unnest": types.AnyTuple, "gen_random_uuid": types.Uuid, "array_length": types.Int, "generate_series": types.Int,
	"floor": types.Float, "extract": types.Float,
}

func newChecker(migrations []string) (*checker, error) {
	c := &checker{cols: map[string]*types.T{}}
	for k, v := range extraColumns {
		c.cols[k] = v
	}
	for _, sql := range migrations {
		stmts, err := parser.Parse(sql)
		if err != nil {
			return nil, fmt.Errorf("parsing migration: %w", err)
		}
		for _, s := range stmts {
			var defs []*tree.ColumnTableDef
			switch st := s.AST.(type) {
			case *tree.CreateTable:
				for _, d := range st.Defs {
					if col, ok := d.(*tree.ColumnTableDef); ok {
						defs = append(defs, col)
					}
				}
			case *tree.AlterTable: // the columns later migrations add
				for _, cmd := range st.Cmds {
					if add, ok := cmd.(*tree.AlterTableAddColumn); ok {
						defs = append(defs, add.ColumnDef)
					}
				}
			}
			for _, col := range defs {
				typ, err := tree.ResolveType(context.Background(), col.Type, nil)
				if err != nil {
					return nil, fmt.Errorf("column %s: %w", col.Name, err)
				}
				name := string(col.Name)
				if old, ok := c.cols[name]; ok && !old.Equivalent(typ) {
					return nil, fmt.Errorf("column %s has types %s and %s in different tables; the checker maps names to one type", name, old, typ)
				}
				c.cols[name] = typ
			}
		}
	}
	return c, nil
}

// result is what checking one SQL text found.
type result struct {
	Statements   int // statements in the text
	Expressions  int // expressions holding a placeholder, type-checked
	Placeholders int
}

// check parses sql (one or more statements) and type-checks it.
func (c *checker) check(sql string) (result, error) {
	stmts, err := parser.Parse(sql)
	if err != nil {
		return result{}, fmt.Errorf("parse: %w", err)
	}
	var res result
	res.Statements = len(stmts)
	for _, s := range stmts {
		st := &stmtCheck{c: c}
		st.sema = tree.MakeSemaContext(nil)
		// Untyped placeholders, as for a statement pgx prepares; the slots after
		// NumPlaceholders stand for columns and function results, fully typed.
		st.sema.Placeholders.Init(s.NumPlaceholders+4096, nil)
		st.next = s.NumPlaceholders
		st.visit(reflect.ValueOf(s.AST), types.AnyElement)
		if st.err != nil {
			return res, st.err
		}
		for i := 0; i < s.NumPlaceholders; i++ {
			if st.sema.Placeholders.Types[i] == nil {
				return res, fmt.Errorf("could not determine data type of placeholder $%d", i+1)
			}
		}
		res.Expressions += st.exprs
		res.Placeholders += s.NumPlaceholders
	}
	return res, nil
}

type stmtCheck struct {
	c     *checker
	sema  tree.SemaContext
	next  int // next free typed slot
	exprs int
	err   error
}

var (
	exprType = reflect.TypeOf((*tree.Expr)(nil)).Elem()
	typeT    = reflect.TypeOf((*types.T)(nil))
)

// visit walks any AST node by reflection and type-checks each root expression it finds
// with the type its position asks for.
func (st *stmtCheck) visit(v reflect.Value, desired *types.T) {
	if st.err != nil || !v.IsValid() {
		return
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		if v.IsNil() {
			return
		}
	}
	if v.Type() == typeT {
		return
	}
	if v.Kind() != reflect.Interface && v.Type().Implements(exprType) && v.CanInterface() {
		st.root(v.Interface().(tree.Expr), desired)
		return
	}
	if v.CanInterface() {
		switch n := v.Interface().(type) {
		case *tree.Limit:
			st.visit(reflect.ValueOf(n.Count), types.Int)
			st.visit(reflect.ValueOf(n.Offset), types.Int)
			return
		case *tree.Where:
			st.visit(reflect.ValueOf(n.Expr), types.Bool)
			return
		case *tree.OnJoinCond:
			st.visit(reflect.ValueOf(n.Expr), types.Bool)
			return
		case *tree.UpdateExpr:
			want := types.AnyElement
			if len(n.Names) == 1 {
				if t, ok := st.c.cols[string(n.Names[0])]; ok {
					want = t
				}
			}
			st.visit(reflect.ValueOf(n.Expr), want)
			return
		case *tree.Insert:
			st.visit(reflect.ValueOf(n.With), types.AnyElement)
			if n.Rows != nil {
				if vals, ok := n.Rows.Select.(*tree.ValuesClause); ok && len(n.Columns) > 0 {
					for _, row := range vals.Rows {
						for i, e := range row {
							want := types.AnyElement
							if i < len(n.Columns) {
								if t, ok := st.c.cols[string(n.Columns[i])]; ok {
									want = t
								}
							}
							st.visit(reflect.ValueOf(e), want)
						}
					}
				} else {
					st.visit(reflect.ValueOf(n.Rows), types.AnyElement)
				}
			}
			st.visit(reflect.ValueOf(n.OnConflict), types.AnyElement)
			st.visit(reflect.ValueOf(n.Returning), types.AnyElement)
			return
		}
	}
	switch v.Kind() {
	case reflect.Interface, reflect.Pointer:
		st.visit(v.Elem(), desired)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				st.visit(v.Field(i), desired)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			st.visit(v.Index(i), desired)
		}
	}
}

// root handles one expression found in a statement: the subqueries in it are statements
// of their own; the expression is type-checked if it holds a placeholder.
func (st *stmtCheck) root(e tree.Expr, desired *types.T) {
	// Each operand of AND is a BOOL of its own, so a condition that joins a placeholder
	// test and a subquery (NOT EXISTS …) is checked operand by operand.
	switch x := e.(type) {
	case *tree.AndExpr:
		st.root(x.Left, types.Bool)
		st.root(x.Right, types.Bool)
		return
	case *tree.ParenExpr:
		st.root(x.Expr, desired)
		return
	}
	if sq, ok := e.(*tree.Subquery); ok {
		st.visit(reflect.ValueOf(sq.Select), types.AnyElement)
		return
	}
	f := &finder{}
	tree.WalkExprConst(f, e)
	for _, sq := range f.subqueries {
		st.visit(reflect.ValueOf(sq.Select), types.AnyElement)
	}
	if f.placeholders == 0 || st.err != nil {
		return
	}
	if len(f.subqueries) > 0 {
		st.err = fmt.Errorf("expression %s mixes a placeholder and a subquery; the checker cannot type it", e)
		return
	}
	st.exprs++
	if _, err := st.typeCheck(e, desired); err != nil {
		st.err = fmt.Errorf("type-checking %s: %w", e, err)
	}
}

func (st *stmtCheck) typeCheck(e tree.Expr, desired *types.T) (tree.TypedExpr, error) {
	r := &rewriter{st: st}
	e2, _ := tree.WalkExpr(r, e)
	if r.err != nil {
		return nil, r.err
	}
	return tree.TypeCheck(context.Background(), e2, &st.sema, desired)
}

// typed returns a placeholder slot already typed as t: a value of type t whose
// constness the type checker cannot exploit, as a column's.
func (st *stmtCheck) typed(t *types.T) tree.Expr {
	idx := st.next
	st.next++
	st.sema.Placeholders.Types[idx] = t
	return &tree.Placeholder{Idx: tree.PlaceholderIdx(idx)}
}

type finder struct {
	placeholders int
	subqueries   []*tree.Subquery
}

func (f *finder) VisitPre(e tree.Expr) (bool, tree.Expr) {
	switch n := e.(type) {
	case *tree.Placeholder:
		f.placeholders++
	case *tree.Subquery:
		f.subqueries = append(f.subqueries, n)
		return false, e
	}
	return true, e
}

func (f *finder) VisitPost(e tree.Expr) tree.Expr { return e }

type rewriter struct {
	st  *stmtCheck
	err error
}

func (r *rewriter) VisitPre(e tree.Expr) (bool, tree.Expr) {
	if r.err != nil {
		return false, e
	}
	switch n := e.(type) {
	case *tree.UnresolvedName:
		if n.Star {
			r.err = fmt.Errorf("star %s in an expression with placeholders", n)
			return false, e
		}
		name := n.Parts[0]
		t, ok := r.st.c.cols[name]
		if !ok {
			r.err = fmt.Errorf("unknown column %q (add it to extraColumns if a CTE defines it)", name)
			return false, e
		}
		return false, r.st.typed(t)
	case *tree.FuncExpr:
		name := strings.ToLower(n.Func.String())
		ret, known := funcReturns[name]
		if !known {
			r.err = fmt.Errorf("function %s is not in funcReturns", name)
			return false, e
		}
		for i, a := range n.Exprs {
			if _, star := a.(tree.UnqualifiedStar); star {
				continue
			}
			te, err := r.st.typeCheck(a, types.AnyElement)
			if err != nil {
				r.err = fmt.Errorf("argument %d of %s: %w", i+1, name, err)
				return false, e
			}
			if ret == nil && i == 0 {
				ret = te.ResolvedType()
			}
		}
		if ret == nil {
			r.err = fmt.Errorf("function %s: no argument to take the type of", name)
			return false, e
		}
		return false, r.st.typed(ret)
	}
	return true, e
}

func (r *rewriter) VisitPost(e tree.Expr) tree.Expr { return e }
