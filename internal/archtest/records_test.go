package archtest

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Every write of a run's record goes through a named transition of
// internal/engine (engine.ClaimRun, engine.SucceedRun, ...), which builds
// the whole next record: no other package sets the fields a transition
// writes. TestRecordsBuiltByTheEngine fails on a non-test file outside the
// engine that assigns one of these fields of a jetflow.Run (r.State = ...,
// r.Error, r.Owner, ...), writes a whole jetflow.Run through a pointer
// (*r = ...), or calls Run.AddAttempt. The root package (where Run is
// defined) and kv (which serializes records) are outside the rule; so are
// the files of recordWriters, each with its reason.

// transitionFields are the fields of jetflow.Run that transitions write
// (run.go). Identity and creation fields (ID, Name, Args, ScheduledTime,
// Timeout, Trace, ...) are a new record's, set where it is built.
var transitionFields = []string{
	"State", "Attempts", "Error", "Result", "Owner", "Heartbeat", "StartedTime", "CompletedTime",
	"Permanent", "HeldBy", "Children", "Progress", "History",
}

// recordRules: packages outside the rule (by path relative to the module).
var recordRules = map[string]string{
	"":                "the Run type's own package (its methods, AddAttempt)",
	"kv":              "serializes records: decoding fills every field",
	"internal/engine": "the named transitions themselves",
}

// recordWriters: files (relative to the module) allowed to set transition
// fields of a jetflow.Run, with the reason. None writes the record it sets.
var recordWriters = map[string]string{
	"dashboard/events.go": "summary: a copy of a record for display (no result), never written",
	"cmd/jetflow/internal/bench/runindex.go": "synthetic records of many states for the run index's benchmark, " +
		"written create-only to an empty bucket",
}

// exportData maps every package the module's packages import (and the
// module's own) to its compiled export data, and lists the module's
// packages with their directory and non-test Go files.
type modPkg struct {
	path, dir string
	files     []string
}

func exportData(t *testing.T) (map[string]string, []modPkg) {
	t.Helper()
	cmd := exec.Command("go", "list", "-export", "-deps", "-f",
		"{{.ImportPath}}\t{{.Export}}\t{{.Dir}}\t{{join .GoFiles \",\"}}\t{{.Module}}", module+"/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	var pkgs []modPkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		if len(f) < 5 {
			continue
		}
		exports[f[0]] = f[1]
		if (f[0] == module || strings.HasPrefix(f[0], module+"/")) && f[3] != "" {
			pkgs = append(pkgs, modPkg{path: f[0], dir: f[2], files: strings.Split(f[3], ",")})
		}
	}
	return exports, pkgs
}

// recordWrites lists what in the files of package path (parsed into fset
// and type-checked with imp) sets a transition field of a jetflow.Run.
func recordWrites(fset *token.FileSet, imp types.Importer, path string, files []*ast.File) ([]string, error) {
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Types: map[ast.Expr]types.TypeAndValue{}}
	conf := types.Config{Importer: imp, Error: func(error) {}}
	if _, err := conf.Check(path, fset, files, info); err != nil {
		return nil, err
	}
	isRun := func(t types.Type) bool {
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		n, ok := t.(*types.Named)
		return ok && n.Obj().Name() == "Run" && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == module
	}
	var out []string
	flag := func(e ast.Expr, what string) {
		out = append(out, fmt.Sprintf("%s: %s", fset.Position(e.Pos()), what))
	}
	lhs := func(e ast.Expr) {
		e = ast.Unparen(e)
		switch x := e.(type) {
		case *ast.SelectorExpr:
			if sel, ok := info.Selections[x]; ok && sel.Kind() == types.FieldVal && isRun(sel.Recv()) && slices.Contains(transitionFields, x.Sel.Name) {
				flag(x, "sets Run."+x.Sel.Name)
			}
		case *ast.StarExpr:
			if tv, ok := info.Types[x]; ok && isRun(tv.Type) {
				flag(x, "writes a whole Run through a pointer")
			}
		case *ast.IndexExpr: // r.Children[i] = ...
			if s, ok := ast.Unparen(x.X).(*ast.SelectorExpr); ok {
				if sel, ok := info.Selections[s]; ok && isRun(sel.Recv()) && slices.Contains(transitionFields, s.Sel.Name) {
					flag(x, "sets an element of Run."+s.Sel.Name)
				}
			}
		}
	}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch s := n.(type) {
			case *ast.AssignStmt:
				if s.Tok != token.DEFINE {
					for _, e := range s.Lhs {
						lhs(e)
					}
				}
			case *ast.IncDecStmt:
				lhs(s.X)
			case *ast.SelectorExpr:
				if sel, ok := info.Selections[s]; ok && sel.Kind() == types.MethodVal && isRun(sel.Recv()) && s.Sel.Name == "AddAttempt" {
					flag(s, "calls Run.AddAttempt")
				}
			}
			return true
		})
	}
	return out, nil
}

func TestRecordsBuiltByTheEngine(t *testing.T) {
	exports, pkgs := exportData(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.path, module), "/")
		if _, out := recordRules[rel]; out {
			continue
		}
		var files []*ast.File
		for _, name := range p.files {
			f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		writes, err := recordWrites(fset, imp, p.path, files)
		if err != nil {
			t.Fatalf("type-check %s: %v", p.path, err)
		}
		checked++
		for _, w := range writes {
			file, _, _ := strings.Cut(w, ":")
			if relFile, err := filepath.Rel(root, file); err == nil && recordWriters[filepath.ToSlash(relFile)] != "" {
				continue
			}
			t.Errorf("%s: a record is built outside internal/engine: use (or add) a named transition there", w)
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d packages: the listing missed the module", checked)
	}
}

// The rule catches what it is for: a worker setting a record's state, and
// the other ways around a constructor; it lets a record built by the
// engine and a new record's identity fields be.
func TestRecordRuleCatchesWrites(t *testing.T) {
	exports, _ := exportData(t)
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	src := `package worker

import (
	"time"

	"github.com/jetflow-dev/jetflow"
	"github.com/jetflow-dev/jetflow/internal/engine"
)

type other struct{ State jetflow.State }

func bad(r *jetflow.Run, v jetflow.Run) {
	r.State = jetflow.Failed
	v.Error, v.Owner = "x", "w"
	(r).Attempts++
	r.Children[0] = "c"
	*r = v
	r.AddAttempt(jetflow.Attempt{})
}

func good(r *jetflow.Run, o *other) *jetflow.Run {
	o.State = jetflow.Failed
	n := &jetflow.Run{ID: "x", State: jetflow.Pending}
	n.Timeout = time.Second
	_ = n
	return engine.CancelRun(r, time.Now())
}
`
	f, err := parser.ParseFile(fset, "worker/bad.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	writes, err := recordWrites(fset, imp, module+"/worker", []*ast.File{f})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sets Run.State", "sets Run.Error", "sets Run.Owner", "sets Run.Attempts",
		"sets an element of Run.Children", "writes a whole Run through a pointer", "calls Run.AddAttempt"}
	if len(writes) != len(want) {
		t.Fatalf("found %d writes, want %d: %q", len(writes), len(want), writes)
	}
	for i, w := range want {
		if !strings.HasSuffix(writes[i], w) || !strings.HasPrefix(writes[i], "worker/bad.go:") {
			t.Errorf("write %d: %q, want %q", i, writes[i], w)
		}
	}
}
