package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// walkGo parses every non-test Go file of the repository outside the
// directories skip names (by path relative to the root, and name), and
// hands each to visit. A walk that reads under 100 files missed the
// repository: the test fails rather than pass on nothing.
func walkGo(t *testing.T, skip func(rel, name string) bool, visit func(fset *token.FileSet, f *ast.File)) {
	t.Helper()
	files := 0
	err := filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("../..", p)
		if d.IsDir() {
			if skip(rel, d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		files++
		visit(fset, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d files: the walk missed the repository", files)
	}
}
