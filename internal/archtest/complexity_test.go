package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"strings"
	"testing"
)

// The code-shape limits of issue 27, asserted here so that CI fails on
// them (golangci-lint, in `task lint`, checks them too, with errcheck):
// no library function above cyclomatic complexity 25 (gocyclo's count),
// and at most 0.6 conditions with three or more &&/|| per 1,000 lines of
// library code. Library code: not tests, not cmd/, examples/,
// integration/, clients/ or bench/.
const (
	maxComplexity = 25
	maxDensePer1k = 0.6
)

func TestCodeShape(t *testing.T) {
	var over []string
	dense, lines := 0, 0
	walkGo(t, skipDir, func(fset *token.FileSet, f *ast.File) {
		lines += fset.File(f.Pos()).LineCount()
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				if c := complexity(fn); c > maxComplexity {
					over = append(over, fmt.Sprintf("%s %s: %d", fset.Position(fn.Pos()), fn.Name.Name, c))
				}
			}
		}
		dense += denseConditions(f)
	})
	if lines < 10000 {
		t.Fatalf("read %d lines of library code: the walk missed the repository", lines)
	}
	for _, o := range over {
		t.Errorf("cyclomatic complexity over %d (split it into steps and named decisions): %s", maxComplexity, o)
	}
	if per1k := float64(dense) * 1000 / float64(max(lines, 1)); per1k > maxDensePer1k {
		t.Errorf("%d conditions with three or more &&/|| in %d lines: %.2f per 1,000, over %.1f (name them)", dense, lines, per1k, maxDensePer1k)
	}
}

// skipDir reports the directories that hold no library code.
func skipDir(rel, name string) bool {
	switch rel {
	case ".":
		return false
	case "cmd", "examples", "integration", "clients", "bench", "docs":
		return true
	}
	return name != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules")
}

// complexity is gocyclo's count: 1, plus one per if, for, range, non-default
// case or select clause, and && or ||.
func complexity(fn *ast.FuncDecl) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}

// denseConditions counts the if and for conditions, case expressions and
// returned values of f with three or more && or ||.
func denseConditions(f *ast.File) int {
	n := 0
	ast.Inspect(f, func(x ast.Node) bool {
		var es []ast.Expr
		switch s := x.(type) {
		case *ast.IfStmt:
			es = append(es, s.Cond)
		case *ast.ForStmt:
			if s.Cond != nil {
				es = append(es, s.Cond)
			}
		case *ast.CaseClause:
			es = append(es, s.List...)
		case *ast.ReturnStmt:
			es = append(es, s.Results...)
		}
		for _, e := range es {
			if logicalOps(e) >= 3 {
				n++
			}
		}
		return true
	})
	return n
}

func logicalOps(e ast.Expr) int {
	n := 0
	ast.Inspect(e, func(x ast.Node) bool {
		if b, ok := x.(*ast.BinaryExpr); ok && (b.Op == token.LAND || b.Op == token.LOR) {
			n++
		}
		_, lit := x.(*ast.FuncLit)
		return !lit
	})
	return n
}
