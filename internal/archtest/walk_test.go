package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
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

// enforce fails the test once for each place check finds in the
// repository's Go files (walkGo with skip), saying what to do there.
func enforce(t *testing.T, skip func(rel, name string) bool, check func(*token.FileSet, *ast.File) []string, what string) {
	t.Helper()
	var found []string
	walkGo(t, skip, func(fset *token.FileSet, f *ast.File) {
		found = append(found, check(fset, f)...)
	})
	for _, v := range found {
		t.Errorf("%s: %s", what, v)
	}
}

// catches runs check on src (a file p.go) and fails unless the places it
// reports ("p.go:<line>") are on exactly the lines want.
func catches(t *testing.T, src string, check func(*token.FileSet, *ast.File) []string, want ...int) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, v := range check(fset, f) {
		var line int
		if _, err := fmt.Sscanf(v[strings.Index(v, ":")+1:], "%d", &line); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		lines = append(lines, line)
	}
	if !slices.Equal(lines, want) {
		t.Fatalf("found on lines %v, want %v", lines, want)
	}
}
