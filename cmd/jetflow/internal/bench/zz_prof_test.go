package bench

import (
	"context"
	"os"
	"runtime/pprof"
	"testing"
	"time"
)

func TestZZClusterProfile(t *testing.T) {
	if os.Getenv("ZZPROF") == "" {
		t.Skip()
	}
	ctx := context.Background()
	url, stop, err := startCluster(ctx, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	replicas.Store(3)
	defer replicas.Store(0)
	raw, err := RawPublishConsume(ctx, url, 20000, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("raw %.0f/s cpu %v", rate(20000, raw.Publish+raw.Consume), per(raw.PublishCPU+raw.ConsumeCPU, 20000))
	f, _ := os.Create("/tmp/cl.prof")
	pprof.StartCPUProfile(f)
	mode := os.Getenv("ZZPROF")
	var e E2E
	if mode == "late" {
		e, err = EndToEndLateClaims(ctx, url, "zzl", 20000, 100)
	} else {
		e, err = EndToEnd(ctx, url, "zze", 20000, 100)
	}
	pprof.StopCPUProfile()
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e %.0f/s cpu %v cost %s", rate(20000, e.Elapsed), per(e.CPU, 20000), e.Cost)
}
