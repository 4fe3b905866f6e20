package engine

import "testing"

func TestClassify(t *testing.T) {
	cases := []struct {
		name  string
		f     DeliveryFacts
		want  DeliveryKind
		read  bool
		claim bool
	}{
		{"first delivery of a new run", DeliveryFacts{NumDelivered: 1, IsNew: true, Attempt: 1}, Fresh, false, false},
		{"first delivery naming its record", DeliveryFacts{NumDelivered: 1, Rev: 7, Attempt: 1}, Fresh, false, false},
		{"a retry naming its record", DeliveryFacts{NumDelivered: 1, Rev: 9, Attempt: 2}, Fresh, false, false},
		{"another producer's message", DeliveryFacts{NumDelivered: 1, Attempt: 1}, Incomplete, true, false},
		{"a new run's retry without a record", DeliveryFacts{NumDelivered: 1, IsNew: true, Attempt: 2}, Incomplete, true, false},
		{"record has more than the message", DeliveryFacts{NumDelivered: 1, Rev: 7, Reload: true}, Incomplete, true, false},
		{"redelivery", DeliveryFacts{NumDelivered: 2, IsNew: true, Attempt: 1}, Redelivered, true, true},
		{"possible replay", DeliveryFacts{NumDelivered: 1, IsNew: true, Attempt: 1, Replay: true}, Replayed, true, true},
		{"held here long", DeliveryFacts{NumDelivered: 1, IsNew: true, Attempt: 1, Held: true}, Waited, true, true},
		{"received across a stall", DeliveryFacts{NumDelivered: 1, Rev: 3, Held: true}, Waited, true, true},
		{"redelivery held long", DeliveryFacts{NumDelivered: 3, Held: true}, Redelivered, true, true},
	}
	for _, c := range cases {
		k := Classify(c.f)
		if k != c.want || k.ReadsRecord() != c.read || k.ClaimsFirst() != c.claim {
			t.Errorf("%s: %v (reads %v, claims first %v), want %v (%v, %v)", c.name, k, k.ReadsRecord(), k.ClaimsFirst(), c.want, c.read, c.claim)
		}
	}
}
