// Package namestest checks from a package's tests that the String method of
// one of its enumerated types names every constant the package declares of
// that type.
package namestest

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// Values returns the values of the constants of type typeName declared in
// the non-test Go files of dir (the package under test: "."), each once,
// in increasing order. It type-checks only the package's own files: an
// imported package is an empty stand-in, so a constant whose value comes
// from another package fails the test rather than being skipped.
func Values(t testing.TB, dir, typeName string) []uint64 {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("namestest: %v", err)
	}
	var files []*ast.File
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			t.Fatalf("namestest: %v", err)
		}
		files = append(files, f)
	}
	conf := types.Config{
		Importer:    stubImporter{},
		FakeImportC: true,
		Error:       func(error) {}, // the stand-ins leave selectors unresolved
	}
	pkg, _ := conf.Check(dir, fset, files, nil)
	seen := map[uint64]bool{}
	var vals []uint64
	for _, name := range pkg.Scope().Names() {
		c, ok := pkg.Scope().Lookup(name).(*types.Const)
		if !ok || name == "_" {
			continue
		}
		named, ok := c.Type().(*types.Named)
		if !ok || named.Obj().Name() != typeName || named.Obj().Pkg() != pkg {
			continue
		}
		if c.Val().Kind() != constant.Int {
			t.Fatalf("namestest: %s: no integer value without its imports (%v)", name, c.Val())
		}
		v, exact := constant.Uint64Val(c.Val())
		if !exact {
			t.Fatalf("namestest: %s = %v is not an unsigned integer", name, c.Val())
		}
		if !seen[v] {
			seen[v] = true
			vals = append(vals, v)
		}
	}
	if len(vals) == 0 {
		t.Fatalf("namestest: no constant of type %s in %s", typeName, dir)
	}
	sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
	return vals
}

// stubImporter hands out an empty package for every import path.
type stubImporter struct{}

func (stubImporter) Import(path string) (*types.Package, error) {
	return types.NewPackage(path, filepath.Base(path)), nil
}

// Check fails t when str, the String method of typeName applied to a
// value, returns the fallback "typeName(n)" for a constant of the type
// declared in dir, or the same name for two of them; and when it does not
// return the fallback for the value one past the largest constant.
func Check(t testing.TB, dir, typeName string, str func(v uint64) string) {
	t.Helper()
	vals := Values(t, dir, typeName)
	byName := map[string]uint64{}
	for _, v := range vals {
		s := str(v)
		if s == "" || s == typeName+"("+strconv.FormatUint(v, 10)+")" {
			t.Errorf("%s(%d) has no name: String returns %q", typeName, v, s)
			continue
		}
		if w, dup := byName[s]; dup {
			t.Errorf("%s(%d) and %s(%d) are both %q", typeName, w, typeName, v, s)
		}
		byName[s] = v
	}
	past := vals[len(vals)-1] + 1
	if got, want := str(past), typeName+"("+strconv.FormatUint(past, 10)+")"; got != want {
		t.Errorf("String of %s(%d), past the last constant, = %q, want %q", typeName, past, got, want)
	}
}
