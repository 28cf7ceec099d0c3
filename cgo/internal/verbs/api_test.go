package verbs

import (
	"bytes"
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// exportedAPI returns one line per exported declaration of the package's
// non-test files that a Linux build with cgo on or off compiles: constants
// and variables by name, types with their exported fields, functions and
// methods with their signatures (parameter names left out).
func exportedAPI(t *testing.T, cgoOn bool) []string {
	t.Helper()
	bc := build.Default
	bc.GOOS, bc.GOARCH, bc.CgoEnabled = "linux", "amd64", cgoOn
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var api []string
	typeString := func(e ast.Expr) string {
		var b bytes.Buffer
		require.NoError(t, printer.Fprint(&b, fset, e))
		return b.String()
	}
	fieldTypes := func(fl *ast.FieldList) string {
		if fl == nil {
			return ""
		}
		var parts []string
		for _, f := range fl.List {
			n := max(len(f.Names), 1)
			for range n {
				parts = append(parts, typeString(f.Type))
			}
		}
		return strings.Join(parts, ", ")
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		ok, err := bc.MatchFile(".", name)
		require.NoError(t, err)
		if !ok {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				sig := "func " + d.Name.Name + "(" + fieldTypes(d.Type.Params) + ") (" + fieldTypes(d.Type.Results) + ")"
				if d.Recv != nil {
					recv := typeString(d.Recv.List[0].Type)
					if !ast.IsExported(strings.TrimPrefix(recv, "*")) {
						continue
					}
					sig = "method (" + recv + ") " + strings.TrimPrefix(sig, "func ")
				}
				api = append(api, sig)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								api = append(api, d.Tok.String()+" "+n.Name)
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						line := "type " + s.Name.Name
						if st, ok := s.Type.(*ast.StructType); ok {
							var fields []string
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									if n.IsExported() {
										fields = append(fields, n.Name+" "+typeString(fl.Type))
									}
								}
								if len(fl.Names) == 0 {
									fields = append(fields, typeString(fl.Type))
								}
							}
							line += " struct{" + strings.Join(fields, "; ") + "}"
						} else {
							line += " " + typeString(s.Type)
						}
						api = append(api, line)
					}
				}
			}
		}
	}
	sort.Strings(api)
	return api
}

// TestSameAPIWithAndWithoutCgo: the package exports the same names, fields
// and signatures whether cgo is on or off, so that a program written
// against it builds either way (the stubs return ErrUnavailable).
func TestSameAPIWithAndWithoutCgo(t *testing.T) {
	with, without := exportedAPI(t, true), exportedAPI(t, false)
	require.NotEmpty(t, with)
	require.Equal(t, with, without)
}
