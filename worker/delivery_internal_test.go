package worker

import "testing"

func TestClassify(t *testing.T) {
	cases := []struct {
		name  string
		f     deliveryFacts
		want  deliveryKind
		read  bool
		claim bool
	}{
		{"first delivery of a new run", deliveryFacts{numDelivered: 1, isNew: true, attempt: 1}, fresh, false, false},
		{"first delivery naming its record", deliveryFacts{numDelivered: 1, rev: 7, attempt: 1}, fresh, false, false},
		{"a retry naming its record", deliveryFacts{numDelivered: 1, rev: 9, attempt: 2}, fresh, false, false},
		{"another producer's message", deliveryFacts{numDelivered: 1, attempt: 1}, incomplete, true, false},
		{"a new run's retry without a record", deliveryFacts{numDelivered: 1, isNew: true, attempt: 2}, incomplete, true, false},
		{"record has more than the message", deliveryFacts{numDelivered: 1, rev: 7, reload: true}, incomplete, true, false},
		{"redelivery", deliveryFacts{numDelivered: 2, isNew: true, attempt: 1}, redelivered, true, true},
		{"possible replay", deliveryFacts{numDelivered: 1, isNew: true, attempt: 1, replay: true}, replayed, true, true},
		{"held here long", deliveryFacts{numDelivered: 1, isNew: true, attempt: 1, held: true}, waited, true, true},
		{"received across a stall", deliveryFacts{numDelivered: 1, rev: 3, held: true}, waited, true, true},
		{"redelivery held long", deliveryFacts{numDelivered: 3, held: true}, redelivered, true, true},
	}
	for _, c := range cases {
		k := classify(c.f)
		if k != c.want || k.readsRecord() != c.read || k.claimsFirst() != c.claim {
			t.Errorf("%s: %v (reads %v, claims first %v), want %v (%v, %v)", c.name, k, k.readsRecord(), k.claimsFirst(), c.want, c.read, c.claim)
		}
	}
}
