package layout

import (
	"go/ast"
	"go/printer"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// isZero reports whether e is the zero literal of a number or a string.
func isZero(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	return ok && (lit.Value == "0" || lit.Value == `""`)
}

// isLiteral reports whether e is a value written out rather than named:
// a number or string literal, or a product of them with time's units
// (2 * time.Second, time.Minute).
func isLiteral(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.BasicLit:
		return true
	case *ast.ParenExpr:
		return isLiteral(v.X)
	case *ast.UnaryExpr:
		return isLiteral(v.X)
	case *ast.BinaryExpr:
		return isLiteral(v.X) && isLiteral(v.Y)
	case *ast.SelectorExpr:
		pkg, ok := v.X.(*ast.Ident)
		return ok && pkg.Name == "time"
	}
	return false
}

// literalZeroDefaults returns "file:line: X = value" for every default a
// non-test file of a library package applies to a zero field with a
// literal value (if c.Nodes == 0 { c.Nodes = 3 }) instead of a named
// constant. The command (package main) is left out: its defaults are the
// settings' schema, shown by its help and reference.
func literalZeroDefaults(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	fset := token.NewFileSet()
	text := func(e ast.Expr) string {
		var b strings.Builder
		printer.Fprint(&b, fset, e)
		return b.String()
	}
	err := eachSource(root, fset, func(path string, f *ast.File) error {
		if f.Name.Name == "main" {
			return nil
		}
		at := func(n ast.Node, what string) {
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel+":"+strconv.Itoa(fset.Position(n.Pos()).Line)+": "+what)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			// x.F = or(x.F, 2*time.Second), with cmp.Or alike.
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Rhs) == 1 {
				if call, ok := as.Rhs[0].(*ast.CallExpr); ok && len(call.Args) == 2 && isLiteral(call.Args[1]) {
					if fn := text(call.Fun); (fn == "or" || fn == "cmp.Or") && text(call.Args[0]) == text(as.Lhs[0]) {
						at(as, text(as.Lhs[0])+" = "+text(call.Args[1]))
					}
				}
			}
			is, ok := n.(*ast.IfStmt)
			if !ok {
				return true
			}
			cond, ok := is.Cond.(*ast.BinaryExpr)
			if !ok || (cond.Op != token.EQL && cond.Op != token.LEQ) || !isZero(cond.Y) {
				return true
			}
			field, ok := cond.X.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			for _, st := range is.Body.List {
				as, ok := st.(*ast.AssignStmt)
				if !ok || as.Tok != token.ASSIGN || len(as.Lhs) != 1 || text(as.Lhs[0]) != text(field) {
					continue
				}
				if isLiteral(as.Rhs[0]) {
					at(as, text(field)+" = "+text(as.Rhs[0]))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestZeroDefaultsNamed: a zero field of a library Config takes its
// default from an exported constant (the design brief: every default is
// an exported constant, and the docs quote it), never from a number
// written where it is applied.
func TestZeroDefaultsNamed(t *testing.T) {
	for _, d := range literalZeroDefaults(t, moduleRoot(t)) {
		t.Errorf("%s: a default written out; name it with an exported Default… constant", d)
	}
}
