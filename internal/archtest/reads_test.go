package archtest

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// The one rule for reads (kv's package doc, "Reads"): a run's record is read
// through kv.Store.Show (a display) or kv.Store.Decide (a decision), never
// by a Get of the runs bucket's own KeyValue handle outside kv, which would
// choose a third read at its call site. A handle of the runs bucket is
// Store.Runs(), or a KeyValue opened on RunsBucket() (or on a name ending
// in "_runs"), or a variable assigned one of those in the same file.
//
// Outside the rule: kv itself; tests; internal/testserver, whose stale
// replica is proven by asking what a raw direct get answers.
func TestRunReadsGoThroughShowOrDecide(t *testing.T) {
	skip := func(rel, name string) bool {
		return rel == "kv" || rel == filepath.Join("internal", "testserver") || rel == "docs" ||
			rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules")
	}
	enforce(t, skip, rawRunReads, "a raw read of the runs bucket (read a record with kv.Store.Show or kv.Store.Decide)")
}

// The check finds each form of a raw read, and leaves other buckets' reads
// and the two kinds alone.
func TestRunReadsRuleCatchesRawGets(t *testing.T) {
	const src = `package p

func f(ctx context.Context, st *kv.Store, js jetstream.JetStream, cfg streams.Config) {
	st.Runs().Get(ctx, "a")                   // 4: the store's handle
	runs := st.Runs()
	runs.Get(ctx, "b")                        // 6: a variable holding it
	kvb, _ := js.KeyValue(ctx, cfg.RunsBucket())
	kvb.GetRevision(ctx, "c", 3)              // 8: a handle opened on the bucket
	named, _ := js.KeyValue(ctx, "app_runs")
	named.Get(ctx, "d")                       // 10: opened by its name
	st.Show(ctx, "e")
	st.Decide(ctx, "f")
	other, _ := js.KeyValue(ctx, "orders")
	other.Get(ctx, "g")
	runs.Watch(ctx, "h")
}
`
	catches(t, src, rawRunReads, 4, 6, 8, 10)
}

// rawRunReads lists the Get and GetRevision calls of f on a handle of the
// runs bucket.
func rawRunReads(fset *token.FileSet, f *ast.File) []string {
	handles := map[string]bool{} // variables assigned a handle
	ast.Inspect(f, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && len(as.Rhs) == 1 && runsHandle(as.Rhs[0], nil) {
			if id, ok := as.Lhs[0].(*ast.Ident); ok {
				handles[id.Name] = true
			}
		}
		return true
	})
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if ok && (sel.Sel.Name == "Get" || sel.Sel.Name == "GetRevision") && runsHandle(sel.X, handles) {
			out = append(out, fset.Position(call.Pos()).String())
		}
		return true
	})
	return out
}

// runsHandle reports whether e is a handle of the runs bucket: a variable
// of handles, X.Runs(), or X.KeyValue(ctx, name) where name is a call of
// RunsBucket or a string ending in "_runs".
func runsHandle(e ast.Expr, handles map[string]bool) bool {
	if id, ok := e.(*ast.Ident); ok {
		return handles[id.Name]
	}
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	switch {
	case sel.Sel.Name == "Runs" && len(call.Args) == 0:
		return true
	case sel.Sel.Name == "KeyValue" && len(call.Args) == 2:
		return runsBucketName(call.Args[1])
	}
	return false
}

// runsBucketName reports whether e names the runs bucket.
func runsBucketName(e ast.Expr) bool {
	switch x := e.(type) {
	case *ast.BasicLit:
		return x.Kind == token.STRING && strings.HasSuffix(strings.Trim(x.Value, "\"`"), "_runs")
	case *ast.CallExpr:
		sel, ok := x.Fun.(*ast.SelectorExpr)
		return ok && sel.Sel.Name == "RunsBucket"
	}
	return false
}
