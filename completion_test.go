package jetflow_test

import (
	"encoding/json"
	"testing"

	"github.com/jetflow-dev/jetflow"
)

type orderCtx struct {
	Order string `json:"order"`
}

// A typed on-complete function receives its context typed: the call made
// by OnCompleteCall carries the context as its args, and the Completion
// the producer sends decodes into CompletionOf.
func TestTypedCompletion(t *testing.T) {
	done := jetflow.Define[jetflow.CompletionOf[orderCtx]]("orders.done")
	call := jetflow.OnCompleteCall(done, orderCtx{Order: "o-42"})
	if call.Name != "orders.done" {
		t.Fatalf("call %+v", call)
	}
	ctxArgs, err := call.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// What the producer sends when the run ends.
	sent, err := json.Marshal(jetflow.Completion{Run: &jetflow.Run{ID: "r1", State: jetflow.Success}, Context: ctxArgs})
	if err != nil {
		t.Fatal(err)
	}
	var got jetflow.CompletionOf[orderCtx]
	if err := json.Unmarshal(sent, &got); err != nil {
		t.Fatal(err)
	}
	if got.Run == nil || got.Run.ID != "r1" || got.Run.State != jetflow.Success || got.Context.Order != "o-42" {
		t.Fatalf("typed completion %+v", got)
	}
}
