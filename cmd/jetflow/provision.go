package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow-dev/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

func init() {
	register("provision", "create or update jetflow's streams and buckets (needs stream-admin rights): provision [--check] [--replicas N]", runProvision)
}

// runProvision is the explicit provisioning step: producers, workers and
// the CLI then need no stream-admin rights (docs/permissions.md).
func runProvision(ctx context.Context, args []string) error {
	fs := newFlagSet(ctx, "provision", "[--check] [--replicas N] [--storage file|memory] [--duplicate-window D] [--json] [--url URL] [--prefix P]")
	var cf connFlags
	cf.add(fs)
	asJSON := fs.Bool("json", false, "print the outcome as JSON: provisioned, changed, streams, todo")
	check := fs.Bool("check", false, "only check, with read-only requests: exit 1 if something is missing or differs")
	replicas := fs.Int("replicas", 0, "replicas of every stream and bucket (3 on a cluster); 0 keeps those of existing ones, 1 for new ones")
	storage := fs.String("storage", "file", "storage of new streams and buckets: file or memory")
	dups := fs.Duration("duplicate-window", 0, "duplicate window of the function stream; 0: 2 minutes")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErrorf("provision: unexpected argument %q", pos[0])
	}
	if *replicas < 0 || *replicas > 5 {
		return fmt.Errorf("provision: --replicas %d: want 1 to 5", *replicas)
	}
	if *dups < 0 {
		return fmt.Errorf("provision: --duplicate-window %s: must be positive", *dups)
	}
	sc := cf.streams()
	sc.Replicas, sc.DuplicateWindow = *replicas, *dups
	switch *storage {
	case "file":
		sc.Storage = jetstream.FileStorage
	case "memory":
		sc.Storage = jetstream.MemoryStorage
	default:
		return fmt.Errorf("provision: --storage %q: want file or memory", *storage)
	}
	nc, js, err := cf.connect(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	out := stdout(ctx)
	before := streams.Check(ctx, js, sc)
	if before != nil && !errors.Is(before, streams.ErrNotProvisioned) {
		return fmt.Errorf("provision: %w", before)
	}
	names := provisionedNames(sc)
	todo := ""
	if before != nil {
		todo = strings.TrimPrefix(before.Error(), streams.ErrNotProvisioned.Error()+": ")
	}
	report := func(provisioned, changed bool) error {
		if !*asJSON {
			return nil
		}
		return writeJSON(out, provisionJSON{Provisioned: provisioned, Changed: changed, Streams: strings.Split(names, ", "), Todo: todo})
	}
	if *check {
		if err := report(before == nil, false); err != nil {
			return err
		}
		if before != nil {
			return fmt.Errorf("provision --check: %w", before)
		}
		if !*asJSON {
			fmt.Fprintf(out, "provisioned: %s\n", names)
		}
		return nil
	}
	if before == nil {
		if *asJSON {
			return report(true, false)
		}
		fmt.Fprintf(out, "already provisioned, nothing to do: %s\n", names)
		return nil
	}
	if !*asJSON {
		fmt.Fprintf(out, "to do: %s\n", todo)
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := streams.Provision(pctx, js, sc); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	if err := streams.Check(ctx, js, sc); err != nil {
		return fmt.Errorf("provision: after provisioning: %w", err)
	}
	if *asJSON {
		return report(true, true)
	}
	fmt.Fprintf(out, "provisioned: %s\n", names)
	return nil
}

// provisionJSON is the JSON of provision: whether everything is
// provisioned, whether this call changed anything, the streams checked and
// what was missing or differed before.
type provisionJSON struct {
	Provisioned bool     `json:"provisioned"`
	Changed     bool     `json:"changed"`
	Streams     []string `json:"streams"`
	Todo        string   `json:"todo,omitempty"`
}

func provisionedNames(c streams.Config) string {
	return strings.Join([]string{
		c.FunctionStream(), streams.KVStream(c.RunsBucket()), streams.KVStream(c.DelayedBucket()),
		streams.KVStream(c.LeasesBucket()), streams.KVStream(c.FunctionsBucket()), streams.KVStream(c.CronsBucket()),
		streams.KVStream(c.JournalBucket()), streams.KVStream(c.PoolsBucket()), c.IndexStream(),
		streams.ObjectStream(c.PayloadsBucket()),
	}, ", ")
}
