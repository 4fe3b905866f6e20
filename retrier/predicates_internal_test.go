package retrier

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/producer"
)

func TestUnfixableAndUnschedulable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err                      error
		unfixable, unschedulable bool
	}{
		{fmt.Errorf("x: %w", ErrBadRecord), true, false},
		{jetflow.ErrBadRecord, true, false},
		{jetflow.ErrBadArgs, true, true},
		{producer.ErrArgsTooLarge, true, true},
		{jetflow.ErrInvalidName, false, true},
		{jetflow.ErrInvalidRunID, false, true},
		{jetflow.Permanent(errors.New("no")), false, true},
		{errors.New("timeout"), false, false},
	} {
		if got := unfixable(tc.err); got != tc.unfixable {
			t.Errorf("unfixable(%v) = %v, want %v", tc.err, got, tc.unfixable)
		}
		if got := unschedulable(tc.err); got != tc.unschedulable {
			t.Errorf("unschedulable(%v) = %v, want %v", tc.err, got, tc.unschedulable)
		}
	}
}
