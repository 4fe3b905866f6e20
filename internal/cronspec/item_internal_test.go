package cronspec

import "testing"

func TestOccurrence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		nth string
		k   int
		ok  bool
	}{
		{"1", 1, true},
		{"5", 5, true},
		{"0", 0, false},
		{"6", 6, false},
		{"", 0, false},
		{"+2", 0, false},
		{"-1", 0, false},
		{"2x", 0, false},
	} {
		k, ok := occurrence(tc.nth)
		if ok != tc.ok || ok && k != tc.k {
			t.Errorf("occurrence(%q) = %d, %v, want %d, %v", tc.nth, k, ok, tc.k, tc.ok)
		}
	}
}
