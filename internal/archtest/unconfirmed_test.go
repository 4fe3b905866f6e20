package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"slices"
	"testing"
)

// The rule for unconfirmed writes (issue 26): an error that says a write is
// unconfirmed (kv.ErrUnconfirmed) names the refusal or failure it carries
// with %v, and wraps nothing else with %w but the context's error. A
// refusal is an ErrExists or an ErrConflict: wrapped, it makes "nobody
// stored it" match "another write holds it", and a caller that takes
// ErrExists for done loses the run (the partition scenario's lost runs).
func TestUnconfirmedWrapsNoRefusal(t *testing.T) {
	enforce(t, skipDir, unconfirmedWraps, "an unconfirmed write's error wraps another error with %w (name it with %v)")
}

func TestUnconfirmedRuleCatchesWraps(t *testing.T) {
	const src = `package p

func f(err error, ctx context.Context) {
	_ = fmt.Errorf("%w: %w (last: %w)", kv.ErrUnconfirmed, ctx.Err(), err) // 4
	_ = fmt.Errorf("%w: %w (last: %v)", kv.ErrUnconfirmed, ctx.Err(), err)
	_ = fmt.Errorf("%w (%w)", ErrUnconfirmed, err)                        // 6
	_ = fmt.Errorf("%w: %w", ErrExists, err)
}
`
	catches(t, src, unconfirmedWraps, 4, 6)
}

// unconfirmedWraps lists the fmt.Errorf calls of f whose arguments include
// ErrUnconfirmed and whose %w verbs wrap an argument other than it and a
// ctx.Err().
func unconfirmedWraps(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || !isErrorf(call) || len(call.Args) < 2 {
			return true
		}
		lit, ok := call.Args[0].(*ast.BasicLit)
		if !ok || !slices.ContainsFunc(call.Args[1:], isUnconfirmed) {
			return true
		}
		for i, arg := range call.Args[1:] {
			if verbAt(lit.Value, i) == 'w' && !isUnconfirmed(arg) && !isCtxErr(arg) {
				out = append(out, fmt.Sprintf("%s:%d", fset.Position(call.Pos()).Filename, fset.Position(call.Pos()).Line))
				break
			}
		}
		return true
	})
	return out
}

func isErrorf(call *ast.CallExpr) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Errorf"
}

func isUnconfirmed(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name == "ErrUnconfirmed"
	case *ast.SelectorExpr:
		return x.Sel.Name == "ErrUnconfirmed"
	}
	return false
}

// isCtxErr reports ctx.Err() (a context's error: deadline or canceled).
func isCtxErr(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	return ok && sel.Sel.Name == "Err"
}

// verbAt returns the verb letter of the i-th formatting directive of the
// quoted format string lit (0 when there is none).
func verbAt(lit string, i int) byte {
	n := 0
	for k := 0; k+1 < len(lit); k++ {
		if lit[k] != '%' {
			continue
		}
		if lit[k+1] == '%' {
			k++
			continue
		}
		if n == i {
			return lit[k+1]
		}
		n++
	}
	return 0
}
