package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/jetflow-dev/jetflow"

// roles are the packages that run jetflow (producer, worker, scheduler)
// and those built on them, each with the roles it may import, directly or
// not (docs/architecture.md, "Import rules"). A package of the module that
// is not listed here and is no foundation, internal, cmd, example or
// integration package fails the test: place it in the graph first.
var roles = map[string][]string{
	"producer":  {},
	"worker":    {"producer"},
	"scheduler": {"producer"},
	"pool":      {"producer", "worker"},
	"retrier":   {"producer", "worker"},
	"webhook":   {"producer", "worker"},
	"dashboard": {"producer"},
	// jetflowtest: jetflow inside a user's test, on a fake clock.
	"jetflowtest": {"producer", "worker", "scheduler"},
	// workflow: durable workflows, built on the producer and the worker
	// (docs/workflows.md).
	"workflow": {"producer", "worker"},
	// trigger: messages of the user's streams and subjects as runs of a
	// function or a workflow (docs/triggers.md).
	"trigger": {"producer", "worker", "workflow"},
}

// foundation is what every role builds on; it imports no role.
var foundation = []string{"", "streams", "kv", "embedded"}

// deps lists, for every package of the module, the packages of the module
// it imports directly or not (tests excluded), by path relative to the
// module ("" is the root package).
func deps(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, module+"/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return "", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	graph := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		pkg, ok := rel(f[0])
		if !ok {
			continue
		}
		var ds []string
		for _, d := range f[1:] {
			if r, ok := rel(d); ok {
				ds = append(ds, r)
			}
		}
		sort.Strings(ds)
		graph[pkg] = ds
	}
	if len(graph) < 10 {
		t.Fatalf("go list found %d packages of the module: %s", len(graph), out)
	}
	return graph
}

// isRole reports whether p is one of roles.
func isRole(p string) bool {
	_, ok := roles[p]
	return ok
}

func name(p string) string {
	if p == "" {
		return "jetflow (root)"
	}
	return p
}

// violations lists what in graph breaks the import rules.
func violations(graph map[string][]string) []string {
	var out []string
	for _, pkg := range slices.Sorted(maps.Keys(graph)) {
		ds := graph[pkg]
		switch {
		case isRole(pkg):
			// A role imports only the roles documented for it: the
			// producer none (services that only enqueue must not pull
			// in the worker or the scheduler), the worker and the
			// scheduler the producer.
			for _, d := range ds {
				if isRole(d) && !slices.Contains(roles[pkg], d) {
					out = append(out, fmt.Sprintf("%s imports %s: not an import docs/architecture.md allows (%s may import %v)", pkg, d, pkg, roles[pkg]))
				}
			}
		case slices.Contains(foundation, pkg), strings.HasPrefix(pkg, "internal/"):
			// Nothing below the roles imports one.
			for _, d := range ds {
				if isRole(d) {
					out = append(out, fmt.Sprintf("%s imports the role %s: nothing below the roles may", name(pkg), d))
				}
			}
		case pkg == "cmd/jetflow" || strings.HasPrefix(pkg, "cmd/jetflow/internal/"),
			strings.HasPrefix(pkg, "examples/"), pkg == "integration" || strings.HasPrefix(pkg, "integration/"),
			pkg == "clients":
			// Applications (and clients, whose Go package only runs the
			// other languages' tests): they may use every role.
		default:
			out = append(out, fmt.Sprintf("package %s is not in the import rules: add it to docs/architecture.md and to "+
				"roles or foundation in internal/archtest/imports_test.go", pkg))
		}
	}
	return out
}

func TestImportRules(t *testing.T) {
	t.Parallel()
	for _, v := range violations(deps(t)) {
		t.Error(v)
	}
}

// The rules catch what they are for.
func TestImportRulesCatchViolations(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		graph map[string][]string
		want  string
	}{
		{"producer imports the worker", map[string][]string{"producer": {"kv", "worker"}}, "producer imports worker"},
		{"producer depends on the scheduler through another role", map[string][]string{"producer": {"pool", "scheduler"}}, "producer imports scheduler"},
		{"worker imports the scheduler", map[string][]string{"worker": {"producer", "scheduler"}}, "worker imports scheduler"},
		{"scheduler imports the worker", map[string][]string{"scheduler": {"producer", "worker"}}, "scheduler imports worker"},
		{"dashboard imports the worker", map[string][]string{"dashboard": {"producer", "worker"}}, "dashboard imports worker"},
		{"internal imports a role", map[string][]string{"internal/bench": {"kv", "producer"}}, "internal/bench imports the role producer"},
		{"foundation imports a role", map[string][]string{"kv": {"streams", "scheduler"}}, "kv imports the role scheduler"},
		{"a package outside the rules", map[string][]string{"newrole": {"producer"}}, "package newrole is not in the import rules"},
	}
	for _, c := range cases {
		got := violations(c.graph)
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), c.want) {
			t.Errorf("%s: violations %q, want one saying %q", c.name, got, c.want)
		}
	}
	ok := map[string][]string{
		"producer": {"", "internal/engine", "kv", "streams"}, "worker": {"producer"}, "scheduler": {"producer"},
		"pool": {"producer", "worker"}, "cmd/jetflow": {"dashboard", "scheduler", "worker"},
		"cmd/jetflow/internal/bench": {"pool", "scheduler"}, "internal/engine": {"", "kv", "streams"},
	}
	if got := violations(ok); len(got) > 0 {
		t.Errorf("violations of an allowed graph: %q", got)
	}
}
