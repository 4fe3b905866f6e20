package runindex_test

import (
	"os"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/streams"
)

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func TestZZIndexerCatchUp(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ZZN"))
	if n == 0 {
		t.Skip()
	}
	e := setupWith(t, streams.Config{})
	e.write("x", jetflow.Success, n)
	h0 := heap()
	c0, t0 := cpuNow(), time.Now()
	e.startIndexer("one")
	e.caughtUp()
	t.Logf("%d writes indexed in %v: %.0f/s, cpu %.2f µs/write, heap +%d MB", n, time.Since(t0), float64(n)/time.Since(t0).Seconds(), float64(cpuNow()-c0)/float64(n)/1000, (int64(heap())-int64(h0))>>20)
}
