package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"slices"
	"testing"
)

// No dropped result of a state-changing call (issue 27): golangci-lint's
// errcheck (in .ci/run) fails on a call whose error is not read at all;
// this test fails on one set aside with a blank identifier (`_ = x.Ack()`,
// `rev, _ := runs.Write(...)`), which errcheck lets through unless every
// blank is checked, decoders and closers included. A failed write,
// publish, acknowledgement or delete is returned or logged.
//
// stateChanging are the calls that change what jetflow keeps: the ack
// verbs, publishes, bucket and record writes, deletes and purges, and the
// roles' own transitions. Write counts with two or more arguments (a
// record's write; io.Writer's takes one). Not listed: DeleteConsumer, whose
// consumers here are ephemeral (the server removes them after their
// InactiveThreshold whatever the answer).
var stateChanging = []string{
	"Ack", "AckSync", "DoubleAck", "Nak", "NakWithDelay", "Term", "TermWithReason", "InProgress",
	"Publish", "PublishMsg", "PublishAsync", "PublishMsgAsync",
	"Put", "PutString", "PutMsg", "PutDelayed", "Create", "Update", "Delete", "Purge",
	"DeleteStream", "DeleteKeyValue", "RemoveDelayed", "Unqueue",
	"Write", "Change", "Transition", "Release", "Complete", "Cancel", "SetPaused",
}

func TestNoDroppedStateChange(t *testing.T) {
	enforce(t, skipDir, droppedStateChanges, "the result of a state-changing call set aside (return it, or log it)")
}

// The check finds each form of a dropped result, and leaves read ones, other
// calls and a one-argument Write alone.
func TestNoDroppedStateChangeCatchesBlanks(t *testing.T) {
	const src = `package p

func f() {
	_ = m.Ack()                               // 4
	_, _ = s.runs.Write(ctx, r, 0, "")        // 5
	rev, _ := s.Write(ctx, r, 0, "")          // 6
	_ = s.store.RemoveDelayed(ctx, k, 1)      // 7
	if err := m.Nak(); err != nil {
	}
	_, _ = w.Write(b)
	_ = sub.Unsubscribe()
	x, _ := json.Marshal(v)
	_, err := p.Publish(ctx, s, b)
}
`
	catches(t, src, droppedStateChanges, 4, 5, 6, 7)
}

// droppedStateChanges lists the assignments of f whose last (error) result
// of a state-changing call goes to the blank identifier.
func droppedStateChanges(fset *token.FileSet, f *ast.File) []string {
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Rhs) != 1 {
			return true
		}
		if last, ok := as.Lhs[len(as.Lhs)-1].(*ast.Ident); !ok || last.Name != "_" {
			return true
		}
		call, ok := as.Rhs[0].(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || !slices.Contains(stateChanging, sel.Sel.Name) || sel.Sel.Name == "Write" && len(call.Args) < 2 {
			return true
		}
		out = append(out, fmt.Sprintf("%s %s", fset.Position(as.Pos()), sel.Sel.Name))
		return true
	})
	return out
}
