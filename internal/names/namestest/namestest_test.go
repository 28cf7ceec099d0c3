package namestest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// notTables are the integer types of the public packages whose String is
// not a name from a table, and why.
var notTables = map[string]string{
	"ctx.Access": "a set of flags, printed as their names joined by |",
	"ctx.MTU":    "printed as its size in bytes",
}

// TestPublicStringsUseTables checks that the String method of every
// integer type of the module's public packages names its values through
// names.Of, one table per type, rather than a switch or a map of its own.
func TestPublicStringsUseTables(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if base := d.Name(); rel != "." && (base == "internal" || base == "cmd" || base == "testdata" || strings.HasPrefix(base, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ints := map[string]bool{}
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					if id, ok := ts.Type.(*ast.Ident); ok && ts.Assign == 0 && isInteger(id.Name) {
						ints[ts.Name.Name] = true
					}
				}
			}
		}
		pkg := filepath.Base(filepath.Dir(path))
		if filepath.Dir(rel) == "." {
			pkg = "mlx5kit"
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "String" || fn.Body == nil {
				continue
			}
			recv, ok := fn.Recv.List[0].Type.(*ast.Ident)
			if !ok || !ints[recv.Name] || !ast.IsExported(recv.Name) {
				continue
			}
			name := pkg + "." + recv.Name
			if _, ok := notTables[name]; ok {
				continue
			}
			checked++
			if !callsNamesOf(fn.Body) {
				t.Errorf("%s: %s.String does not name its values with names.Of", fset.Position(fn.Pos()), name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no String method of an integer type found")
	}
}

// isInteger reports whether name is a predeclared integer type.
func isInteger(name string) bool {
	switch name {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "uintptr", "byte":
		return true
	}
	return false
}

// callsNamesOf reports whether body calls names.Of.
func callsNamesOf(body *ast.BlockStmt) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "names" && sel.Sel.Name == "Of" {
				found = true
			}
		}
		return !found
	})
	return found
}
