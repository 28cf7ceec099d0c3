package cgo

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFacadeAPI checks that the package exports only what the tools and
// the root package use, and that no file of it depends on the build: no
// import "C" and no build constraint, so every build has the same API.
func TestFacadeAPI(t *testing.T) {
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var names []string
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
		require.NoError(t, err)
		for _, imp := range f.Imports {
			require.NotEqual(t, `"C"`, imp.Path.Value, "%s imports C", n)
		}
		for _, cg := range f.Comments {
			if cg.Pos() < f.Package {
				require.NotContains(t, cg.Text(), "go:build", "%s has a build constraint", n)
			}
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								names = append(names, id.Name)
							}
						}
					}
				}
			}
		}
	}
	sort.Strings(names)
	require.Equal(t, []string{
		"DeviceListing", "Enabled", "ErrNotMLX5", "ErrUnavailable",
		"ListDevices", "NoDeviceReason",
	}, names)
}
