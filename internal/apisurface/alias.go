package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// internalAliases lists, as "package.Name = expression", every exported
// type alias of the public packages matched by patterns whose right-hand
// side names a type of an internal package. go doc shows such an alias as
// its one line, with the fields and methods in a package the reader cannot
// import.
func internalAliases(patterns []string) ([]string, error) {
	pkgs, err := publicPackages(patterns)
	if err != nil {
		return nil, err
	}
	var found []string
	for _, p := range pkgs {
		fset := token.NewFileSet()
		for _, name := range append(p.GoFiles, p.CgoFiles...) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.ImportPath, err)
			}
			for _, a := range aliasesOfInternal(f) {
				found = append(found, p.ImportPath+"."+a)
			}
		}
	}
	return found, nil
}

// aliasesOfInternal returns "Name = expression" for each exported type
// alias of f whose right-hand side names a type of an internal package.
func aliasesOfInternal(f *ast.File) []string {
	internal := map[string]bool{} // the file's names of internal packages
	for _, im := range f.Imports {
		path, err := strconv.Unquote(im.Path.Value)
		if err != nil || public(path) {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		internal[name] = true
	}
	var found []string
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.TYPE {
			continue
		}
		for _, spec := range g.Specs {
			ts := spec.(*ast.TypeSpec)
			if ts.Assign == 0 || !ts.Name.IsExported() {
				continue
			}
			names := false
			ast.Inspect(ts.Type, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] {
						names = true
					}
				}
				return !names
			})
			if names {
				var b strings.Builder
				b.WriteString(ts.Name.Name + " = ")
				_ = printExpr(&b, ts.Type)
				found = append(found, b.String())
			}
		}
	}
	return found
}

// printExpr writes the source form of a type expression.
func printExpr(w io.Writer, e ast.Expr) error {
	switch e := e.(type) {
	case *ast.Ident:
		_, err := io.WriteString(w, e.Name)
		return err
	case *ast.SelectorExpr:
		if err := printExpr(w, e.X); err != nil {
			return err
		}
		_, err := io.WriteString(w, "."+e.Sel.Name)
		return err
	case *ast.StarExpr:
		io.WriteString(w, "*")
		return printExpr(w, e.X)
	case *ast.ArrayType:
		io.WriteString(w, "[]")
		return printExpr(w, e.Elt)
	default:
		_, err := fmt.Fprintf(w, "%T", e)
		return err
	}
}
