package integration_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/testserver"
	"github.com/jetflow-dev/jetflow/pool"
	"github.com/jetflow-dev/jetflow/streams"
)

// keyedPoolArgs and keyedPoolWork mirror jfproc's PoolArgs and PoolWork.
type keyedPoolArgs struct {
	Key    string `json:"key"`
	Item   string `json:"item"`
	WorkMs int    `json:"workMs,omitempty"`
}

var keyedPoolWork = jetflow.Define[keyedPoolArgs]("it.pool.work")

// Per-key limit across processes (issue 12): three worker processes, two of
// them also pool dispatchers (one active), and a scheduler; a per-key limit
// of 2 and max parallelism 8 for 3 keys of 30, 10 and 5 items. The active dispatcher's process is SIGKILLed
// mid-way (its handlers die with it, its runs are delivered again) and a
// new one started. Every handler writes "S <key> <item> <pid>" when it
// starts and "E ..." before it returns to one fsynced ledger: replayed in
// file order (the killed process's open items closed at the kill), no key
// ever has more than 2 items running, and every item succeeds.
func TestFaultPoolKeyLimit(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	url := srv.url()
	ledger := filepath.Join(t.TempDir(), "pool-ledger")
	const limit, keys = 2, 3
	// Uneven keys, more slots than keys x limit: without the limit, K0
	// would take most of the 8 slots.
	perKey := []int{pick(30, 120), pick(10, 40), pick(5, 20)}
	start := func(name string, dispatch bool) *proc {
		args := []string{"--url", url, "--role", "pool", "--id", name, "--pool", "keys", "--key-limit", fmt.Sprint(limit),
			"--max-parallelism", "8", "--pool-ledger", ledger, "--concurrency", "8", "--ack-wait", "2s"}
		if dispatch {
			args = append(args, "--dispatch")
		}
		return startProc(t, name, args...)
	}
	procs := map[string]*proc{"w1": start("w1", true), "w2": start("w2", true), "w3": start("w3", false)}
	// A scheduler, as in production: its repair sweep publishes a run whose
	// record the killed dispatcher wrote but did not publish.
	startProc(t, "scheduler", "--url", url, "--role", "scheduler", "--id", "s1")

	_, js := connect(t, url)
	p := newProducer(t, js, streams.Config{})
	var pl *pool.Pool
	retry(t, 30*time.Second, "pool.New", func(ctx context.Context) error {
		var err error
		pl, err = pool.New(ctx, p, pool.Config{Name: "keys", MaxParallelism: 8, KeyLimit: limit,
			Key: pool.KeyOf(func(a keyedPoolArgs) string { return a.Key })})
		return err
	})
	var entries []pool.Entry
	var ids []string
	for k := range keys {
		for i := range perKey[k] {
			key, id := fmt.Sprintf("K%d", k), fmt.Sprintf("K%d-%d", k, i)
			entries = append(entries, pool.Entry{Call: keyedPoolWork.With(keyedPoolArgs{Key: key, Item: id, WorkMs: 40}),
				Options: []pool.Option{pool.WithID(id)}})
			ids = append(ids, id)
		}
	}
	retry(t, 30*time.Second, "enqueue", func(ctx context.Context) error {
		_, err := pl.EnqueueBatch(ctx, entries)
		return err
	})

	// Kill the active dispatcher's process once a fifth of the items ran.
	leader := ""
	waitStarts := func(n int) {
		testserver.Eventually(t, 60*time.Second, fmt.Sprintf("%d handler starts", n), func() bool { return countStarts(t, ledger) >= n })
	}
	waitStarts(len(ids) / 5)
	testserver.Eventually(t, 30*time.Second, "a dispatcher process holding the lease", func() bool {
		for _, name := range []string{"w1", "w2"} {
			last := ""
			for _, l := range procs[name].snapshot() {
				if strings.HasSuffix(l, " pool "+name) {
					last = l
				}
			}
			if last == "LEADER pool "+name {
				leader = name
				return true
			}
		}
		return false
	})
	victim := procs[leader]
	pid := victim.cmd.Process.Pid
	victim.kill()
	killedAt, err := os.Stat(ledger)
	if err != nil {
		t.Fatal(err)
	}
	procs["w4"] = start("w4", true)

	deadline := time.Now().Add(pick(90*time.Second, 300*time.Second))
	for _, id := range ids {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			it, err := pl.Status(ctx, id)
			cancel()
			if err == nil && it.Finished() {
				if it.State != jetflow.Success {
					t.Errorf("item %s: %s (%s)", id, it.State, it.Error)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("item %s not finished: %+v %v", id, it, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	maxPerKey, started := replayLedger(t, ledger, killedAt.Size(), pid)
	figs := newFigures()
	figs.set("items", len(ids))
	figs.set("key_limit", limit)
	worst := 0
	for k := range keys {
		key := fmt.Sprintf("K%d", k)
		figs.set("max_"+key, maxPerKey[key])
		worst = max(worst, maxPerKey[key])
		if maxPerKey[key] > limit {
			t.Errorf("key %s: %d items ran at once across the processes, limit %d", key, maxPerKey[key], limit)
		}
	}
	for _, id := range ids {
		if started[id] == 0 {
			t.Errorf("item %s never started a handler", id)
		}
	}
	figs.set("killed_dispatcher", leader)
	figs.print(t, "pool-key-limit")
	if worst == 0 {
		t.Fatal("the ledger shows no run")
	}
}

// countStarts counts the S lines of the ledger.
func countStarts(t *testing.T, path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), "S ")
}

// replayLedger replays the start/end ledger in file order and returns the
// most items of each key open at once, and how many starts each item had.
// At byte offset killedAt, the items the killed process (pid) had open are
// closed: it was dead from then on.
func replayLedger(t *testing.T, path string, killedAt int64, pid int) (map[string]int, map[string]int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := map[string]map[string]map[int]bool{} // key -> item -> pids running it
	maxOpen := map[string]int{}
	starts := map[string]int{}
	var off int64
	closed := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !closed && off >= killedAt {
			closed = true
			for _, items := range open {
				for item, pids := range items {
					delete(pids, pid)
					if len(pids) == 0 {
						delete(items, item)
					}
				}
			}
		}
		off += int64(len(line)) + 1
		var kind, key, item string
		var p int
		if _, err := fmt.Sscanf(line, "%s %s %s %d", &kind, &key, &item, &p); err != nil {
			t.Fatalf("ledger: malformed line %q", line)
		}
		if open[key] == nil {
			open[key] = map[string]map[int]bool{}
		}
		switch kind {
		case "S":
			starts[item]++
			if open[key][item] == nil {
				open[key][item] = map[int]bool{}
			}
			open[key][item][p] = true
			maxOpen[key] = max(maxOpen[key], len(open[key]))
		case "E":
			if pids := open[key][item]; pids != nil {
				delete(pids, p)
				if len(pids) == 0 {
					delete(open[key], item)
				}
			}
		default:
			t.Fatalf("ledger: malformed line %q", line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return maxOpen, starts
}

// A worker process (not the dispatcher) is SIGKILLed while it holds pool
// slots: the slots come back (its runs are delivered again to another
// worker, or repaired), every item succeeds, and the limit is never
// exceeded across the processes, the killed one's handlers counted as
// running until the kill.
func TestFaultPoolWorkerKilledHoldingSlots(t *testing.T) {
	t.Parallel()
	srv := startNATS(t)
	url := srv.url()
	ledger := filepath.Join(t.TempDir(), "pool-ledger")
	const limit = 4
	n := pick(24, 96)
	start := func(name string, dispatch bool) *proc {
		args := []string{"--url", url, "--role", "pool", "--id", name, "--pool", "slots", "--key-limit", fmt.Sprint(limit),
			"--max-parallelism", fmt.Sprint(limit), "--pool-ledger", ledger, "--concurrency", "8", "--ack-wait", "2s"}
		if dispatch {
			args = append(args, "--dispatch")
		}
		return startProc(t, name, args...)
	}
	start("d1", true)
	victim := start("w1", false)
	startProc(t, "scheduler", "--url", url, "--role", "scheduler", "--id", "s1")

	_, js := connect(t, url)
	p := newProducer(t, js, streams.Config{})
	var pl *pool.Pool
	retry(t, 30*time.Second, "pool.New", func(ctx context.Context) error {
		var err error
		pl, err = pool.New(ctx, p, pool.Config{Name: "slots", MaxParallelism: limit, KeyLimit: limit,
			Key: pool.KeyOf(func(a keyedPoolArgs) string { return a.Key })})
		return err
	})
	var entries []pool.Entry
	var ids []string
	for i := range n {
		id := fmt.Sprintf("S-%d", i)
		entries = append(entries, pool.Entry{Call: keyedPoolWork.With(keyedPoolArgs{Key: "K", Item: id, WorkMs: 300}),
			Options: []pool.Option{pool.WithID(id)}})
		ids = append(ids, id)
	}
	retry(t, 30*time.Second, "enqueue", func(ctx context.Context) error {
		_, err := pl.EnqueueBatch(ctx, entries)
		return err
	})
	pid := victim.cmd.Process.Pid
	testserver.Eventually(t, 60*time.Second, "the worker process running two items", func() bool {
		return openOf(ledger, pid) >= 2
	})
	victim.kill()
	killedAt, err := os.Stat(ledger)
	if err != nil {
		t.Fatal(err)
	}
	start("w2", false)

	deadline := time.Now().Add(pick(90*time.Second, 300*time.Second))
	for _, id := range ids {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			it, err := pl.Status(ctx, id)
			cancel()
			if err == nil && it.Finished() {
				if it.State != jetflow.Success {
					t.Errorf("item %s: %s (%s)", id, it.State, it.Error)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("item %s not finished: %+v %v", id, it, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	testserver.Eventually(t, 30*time.Second, "every slot given back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		inf, err := pl.Info(ctx)
		return err == nil && len(inf.Running) == 0
	})
	maxOpen, started := replayLedger(t, ledger, killedAt.Size(), pid)
	if maxOpen["K"] > limit {
		t.Errorf("%d items ran at once across the processes, limit %d", maxOpen["K"], limit)
	}
	for _, id := range ids {
		if started[id] == 0 {
			t.Errorf("item %s never started a handler", id)
		}
	}
	figs := newFigures()
	figs.set("items", n)
	figs.set("limit", limit)
	figs.set("max_running", maxOpen["K"])
	figs.print(t, "pool-worker-killed")
}

// openOf counts the items process pid has started and not ended in the
// ledger.
func openOf(path string, pid int) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		var kind, key, item string
		var p int
		if _, err := fmt.Sscanf(l, "%s %s %s %d", &kind, &key, &item, &p); err != nil || p != pid {
			continue
		}
		switch kind {
		case "S":
			n++
		case "E":
			n--
		}
	}
	return n
}
