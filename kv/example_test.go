package kv_test

import (
	"fmt"
	"time"

	"github.com/jetflow-dev/jetflow/kv"
)

func ExampleDelayedKey() {
	// A run due later waits under <due unix second>.<run id>, so the
	// scheduler reads one second's entries with the key filter "<second>.*".
	due := time.Date(2026, 12, 25, 9, 0, 0, 500_000_000, time.UTC)
	key := kv.DelayedKey(due, "order-42-payment-check")
	fmt.Println(key)
	sec, id, ok := kv.ParseDelayedKey(key)
	fmt.Println(sec == due.Unix(), id, ok)
	// Output:
	// 1798189200.order-42-payment-check
	// true order-42-payment-check true
}
