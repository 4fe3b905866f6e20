package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-dev/jetflow/cmd/jetflow/internal/doctor"
	"github.com/jetflow-dev/jetflow/internal/health"
	"go.yaml.in/yaml/v3"
)

// The deploy recipes of docs/deploy.md are files in docs/deploy/: every
// manifest parses, and what it names exists in the code (the probe paths,
// the ports the programs listen on, their flags, the scaling endpoint's
// field), so a renamed flag or path breaks this test, not a deployment.

const deployDir = "../../docs/deploy"

// obj is one Kubernetes object, as parsed.
type obj = map[string]any

func get(o any, path ...string) any {
	for _, k := range path {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[k]
	}
	return o
}

func str(o any, path ...string) string { s, _ := get(o, path...).(string); return s }

func list(o any, path ...string) []any { l, _ := get(o, path...).([]any); return l }

// manifests parses every YAML file of docs/deploy, each document an object.
func manifests(t *testing.T) map[string][]obj {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(deployDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s: %v", deployDir, err)
	}
	out := map[string][]obj{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var o obj
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if str(o, "apiVersion") == "" || str(o, "kind") == "" || str(o, "metadata", "name") == "" {
				t.Errorf("%s: an object without apiVersion, kind or metadata.name: %v", f, o)
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], o)
		}
	}
	return out
}

// programFlags are the flags a program named in a manifest takes: jetflow
// subcommands' from their --help, examples/gracefulworker's from its source.
func programFlags(t *testing.T, argv []string) (flags []string, rest []string) {
	t.Helper()
	switch filepath.Base(argv[0]) {
	case "jetflow":
		if len(argv) < 2 {
			t.Fatalf("%v: no subcommand", argv)
		}
		out, _, err := cli(context.Background(), t, argv[1], "--help")
		if err != nil && !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("jetflow %s --help: %v", argv[1], err)
		}
		for _, m := range regexp.MustCompile(`(?m)^  --([a-z-]+)`).FindAllStringSubmatch(out, -1) {
			flags = append(flags, m[1])
		}
		return flags, argv[2:]
	case "gracefulworker":
		src, err := os.ReadFile("../../examples/gracefulworker/main.go")
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`flag\.\w+\((?:&[\w.]+, )?"([a-z-]+)"`).FindAllStringSubmatch(string(src), -1) {
			flags = append(flags, m[1])
		}
		return flags, argv[1:]
	}
	t.Fatalf("%v: a program this test does not know: add its flags to programFlags", argv)
	return nil, nil
}

// checkArgs checks that every --flag of argv is one its program takes, and
// returns the flags' values.
func checkArgs(t *testing.T, where string, argv []string) map[string]string {
	t.Helper()
	known, rest := programFlags(t, argv)
	if len(known) < 3 {
		t.Fatalf("%s: found only flags %v of %v: the flag listing changed", where, known, argv)
	}
	vals := map[string]string{}
	for i := 0; i < len(rest); i++ {
		name, ok := strings.CutPrefix(rest[i], "--")
		if !ok {
			t.Errorf("%s: argument %q is not a flag", where, rest[i])
			continue
		}
		name, val, hasVal := strings.Cut(name, "=")
		if !slices.Contains(known, name) {
			t.Errorf("%s: %s takes no flag --%s (it takes %v)", where, argv[0], name, known)
		}
		if !hasVal && i+1 < len(rest) && !strings.HasPrefix(rest[i+1], "--") {
			val = rest[i+1]
			i++
		}
		vals[name] = val
	}
	return vals
}

func listenPort(t *testing.T, where, addr string) int {
	t.Helper()
	_, p, ok := strings.Cut(addr, ":")
	n, err := strconv.Atoi(p)
	if !ok || err != nil {
		t.Fatalf("%s: listen address %q has no port", where, addr)
	}
	return n
}

func containerPorts(c any) map[string]int {
	ports := map[string]int{}
	for _, p := range list(c, "ports") {
		n, _ := get(p, "containerPort").(int)
		ports[str(p, "name")] = n
		ports[strconv.Itoa(n)] = n
	}
	return ports
}

// checkContainer checks one container of a workload and returns its flags.
func checkContainer(t *testing.T, where string, c any) map[string]string {
	t.Helper()
	var argv []string
	for _, a := range append(list(c, "command"), list(c, "args")...) {
		argv = append(argv, fmt.Sprint(a))
	}
	if len(argv) == 0 {
		t.Fatalf("%s: no command", where)
	}
	if argv[0] == "nats-server" || strings.HasPrefix(str(c, "image"), "nats:") {
		return nil
	}
	vals := checkArgs(t, where, argv)
	addr := vals["listen"] + vals["health"]
	ports := containerPorts(c)
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		path := str(c, probe, "httpGet", "path")
		if path != health.LivePath && path != health.ReadyPath {
			t.Errorf("%s: %s path %q: the health handlers answer %s and %s", where, probe, path, health.LivePath, health.ReadyPath)
		}
		if (probe == "livenessProbe") != (path == health.LivePath) {
			t.Errorf("%s: %s on %s", where, probe, path)
		}
		port := fmt.Sprint(get(c, probe, "httpGet", "port"))
		if n, ok := ports[port]; !ok || n != listenPort(t, where, addr) {
			t.Errorf("%s: %s port %s is not the port the program listens on (%q)", where, probe, port, addr)
		}
	}
	return vals
}

func TestDeployManifests(t *testing.T) {
	t.Parallel()
	all := manifests(t)
	for _, want := range []string{"nats.yaml", "worker.yaml", "scheduler.yaml", "dashboard.yaml", "keda.yaml"} {
		if len(all[want]) == 0 {
			t.Errorf("docs/deploy/%s is missing", want)
		}
	}
	workloads := map[string]obj{}
	var services, scaled []obj
	for file, objs := range all {
		for _, o := range objs {
			where := file + ": " + str(o, "kind") + " " + str(o, "metadata", "name")
			switch str(o, "kind") {
			case "Deployment", "StatefulSet":
				workloads[str(o, "metadata", "name")] = o
				checkWorkload(t, where, o)
			case "Service":
				services = append(services, o)
			case "ScaledObject":
				scaled = append(scaled, o)
			}
		}
	}
	if s := workloads["jetflow-scheduler"]; s == nil || get(s, "spec", "replicas") != 2 {
		t.Errorf("the scheduler Deployment does not run two replicas")
	}
	checkNATS(t, all["nats.yaml"], workloads["nats"])
	checkServices(t, services, workloads)
	checkScaledObjects(t, scaled, workloads, services)
}

// checkWorkload checks a Deployment's containers; a worker's pod grace
// outlasts twice its --grace (RunUntilSignal's Stop, then the canceled
// handlers' return).
func checkWorkload(t *testing.T, where string, o obj) {
	t.Helper()
	for _, c := range list(o, "spec", "template", "spec", "containers") {
		vals := checkContainer(t, where, c)
		g, ok := vals["grace"]
		if !ok {
			continue
		}
		d, err := time.ParseDuration(g)
		if err != nil {
			t.Fatalf("%s: --grace %q: %v", where, g, err)
		}
		tg, _ := get(o, "spec", "template", "spec", "terminationGracePeriodSeconds").(int)
		if time.Duration(tg)*time.Second <= 2*d {
			t.Errorf("%s: terminationGracePeriodSeconds %d is not above twice --grace %s", where, tg, d)
		}
	}
}

// checkNATS: a 3-node cluster, fsync always, a server at doctor.MinServer
// or later.
func checkNATS(t *testing.T, objs []obj, sts obj) {
	t.Helper()
	if sts == nil || get(sts, "spec", "replicas") != 3 {
		t.Fatalf("nats.yaml: no StatefulSet nats with 3 replicas")
	}
	image := str(list(sts, "spec", "template", "spec", "containers")[0], "image")
	_, tag, _ := strings.Cut(image, ":")
	version, _, _ := strings.Cut(tag, "-")
	if !versionAtLeast(version, doctor.MinServer) {
		t.Errorf("nats.yaml: image %s is older than %s", image, doctor.MinServer)
	}
	var conf string
	for _, o := range objs {
		if str(o, "kind") == "ConfigMap" {
			conf = str(o, "data", "nats.conf")
		}
	}
	for _, want := range []string{"sync_interval: always", "jetstream {", "cluster {", "nats-2."} {
		if !strings.Contains(conf, want) {
			t.Errorf("nats.yaml: nats.conf lacks %q", want)
		}
	}
}

func versionAtLeast(v, min string) bool {
	parse := func(s string) (n [3]int) {
		for i, p := range strings.SplitN(s, ".", 3) {
			n[i], _ = strconv.Atoi(p)
		}
		return n
	}
	a, b := parse(v), parse(min)
	return slices.Compare(a[:], b[:]) >= 0
}

// checkServices: every Service selects a workload and targets a port of it.
func checkServices(t *testing.T, services []obj, workloads map[string]obj) {
	t.Helper()
	for _, s := range services {
		name := str(s, "metadata", "name")
		app := str(s, "spec", "selector", "app")
		var w obj
		for _, cand := range workloads {
			if str(cand, "spec", "template", "metadata", "labels", "app") == app {
				w = cand
			}
		}
		if w == nil {
			t.Errorf("Service %s selects app=%s, which no workload is", name, app)
			continue
		}
		ports := containerPorts(list(w, "spec", "template", "spec", "containers")[0])
		for _, p := range list(s, "spec", "ports") {
			if _, ok := ports[fmt.Sprint(get(p, "targetPort"))]; !ok {
				t.Errorf("Service %s targets port %v, which app=%s does not expose", name, get(p, "targetPort"), app)
			}
		}
	}
}

// checkScaledObjects: KEDA scales a worker Deployment on the scaling
// endpoint of the scheduler's Service, reading a field it answers.
func checkScaledObjects(t *testing.T, scaled []obj, workloads map[string]obj, services []obj) {
	t.Helper()
	for _, so := range scaled {
		if workloads[str(so, "spec", "scaleTargetRef", "name")] == nil {
			t.Errorf("ScaledObject %s scales %q, no Deployment here", str(so, "metadata", "name"), str(so, "spec", "scaleTargetRef", "name"))
		}
		for _, tr := range list(so, "spec", "triggers") {
			if str(tr, "type") != "metrics-api" {
				continue
			}
			u := str(tr, "metadata", "url")
			m := regexp.MustCompile(`^http://([\w-]+)\.[\w.]+:(\d+)(/scaling)\?`).FindStringSubmatch(u)
			if m == nil {
				t.Errorf("ScaledObject url %q is not http://<service>.<ns>...:<port>/scaling?...", u)
				continue
			}
			found := false
			for _, s := range services {
				for _, p := range list(s, "spec", "ports") {
					found = found || str(s, "metadata", "name") == m[1] && fmt.Sprint(get(p, "port")) == m[2]
				}
			}
			if !found || m[1] != "jetflow-scheduler" {
				t.Errorf("ScaledObject url %q: no scheduler Service %s on port %s", u, m[1], m[2])
			}
			if vl := str(tr, "metadata", "valueLocation"); vl != "desiredWorkers" {
				t.Errorf("ScaledObject valueLocation %q, want desiredWorkers", vl)
			}
		}
	}
}

// The systemd unit runs the worker with flags it takes and a stop timeout
// above twice its grace.
func TestDeploySystemdUnit(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(deployDir, "jetflow-worker.service"))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	argv := strings.Fields(keys["ExecStart"])
	if len(argv) == 0 {
		t.Fatal("no ExecStart")
	}
	vals := checkArgs(t, "jetflow-worker.service", argv)
	grace, err := time.ParseDuration(vals["grace"])
	if err != nil {
		t.Fatalf("--grace: %v", err)
	}
	stop, err := strconv.Atoi(keys["TimeoutStopSec"])
	if err != nil || time.Duration(stop)*time.Second <= 2*grace {
		t.Errorf("TimeoutStopSec %q is not above twice --grace %s", keys["TimeoutStopSec"], grace)
	}
	if keys["KillSignal"] != "SIGTERM" {
		t.Errorf("KillSignal %q, want SIGTERM", keys["KillSignal"])
	}
	if _, ok := vals["serve"]; !ok {
		t.Error("the unit does not run the worker with --serve")
	}
}
