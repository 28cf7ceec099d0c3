// Command apisurface counts the exported API of the module's public
// packages: for each package the exported identifiers (top-level constants,
// variables, types and functions, and the exported methods of exported
// types, interface methods included) and the exported fields of exported
// struct types (nested struct literals included). Packages under internal/
// and cmd/ and _test.go files are skipped; the files are those the go
// command builds for the current environment (so CGO_ENABLED changes what
// cgo exports). It prints a table and the totals; make api-surface runs it.
//
// Usage:
//
//	go run ./internal/apisurface [-json] [packages]   (default ./...)
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

// Count is the exported surface of one package.
type Count struct {
	Package     string `json:"package"`
	Identifiers int    `json:"identifiers"`
	Fields      int    `json:"fields"`
}

// listed is the part of `go list -json` the command reads.
type listed struct {
	ImportPath string
	Dir        string
	Name       string
	GoFiles    []string
	CgoFiles   []string
}

func main() {
	asJSON := flag.Bool("json", false, "print JSON instead of a table")
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	counts, err := measure(patterns)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apisurface:", err)
		os.Exit(1)
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(counts); err != nil {
			fmt.Fprintln(os.Stderr, "apisurface:", err)
			os.Exit(1)
		}
		return
	}
	printTable(os.Stdout, counts)
}

// publicPackages lists the packages matched by patterns that are part of
// the public API (not internal, cmd or a main package).
func publicPackages(patterns []string) ([]listed, error) {
	args := append([]string{"list", "-json=ImportPath,Dir,Name,GoFiles,CgoFiles"}, patterns...)
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	var pkgs []listed
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs, nil
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		if public(p.ImportPath) && p.Name != "main" {
			pkgs = append(pkgs, p)
		}
	}
}

// measure lists the packages and counts each public one.
func measure(patterns []string) ([]Count, error) {
	pkgs, err := publicPackages(patterns)
	if err != nil {
		return nil, err
	}
	var counts []Count
	for _, p := range pkgs {
		files := make([]string, 0, len(p.GoFiles)+len(p.CgoFiles))
		for _, f := range append(p.GoFiles, p.CgoFiles...) {
			files = append(files, filepath.Join(p.Dir, f))
		}
		c, err := countFiles(p.ImportPath, files)
		if err != nil {
			return nil, err
		}
		counts = append(counts, c)
	}
	sort.Slice(counts, func(i, j int) bool { return counts[i].Package < counts[j].Package })
	return counts, nil
}

// public reports whether an import path is part of the public API: not
// under internal/ or cmd/.
func public(path string) bool {
	for _, elem := range strings.Split(path, "/") {
		if elem == "internal" || elem == "cmd" {
			return false
		}
	}
	return true
}

// countFiles parses the files of one package and counts its surface.
func countFiles(pkg string, files []string) (Count, error) {
	fset := token.NewFileSet()
	var parsed []*ast.File
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return Count{}, fmt.Errorf("%s: %w", pkg, err)
		}
		parsed = append(parsed, f)
	}
	c := countAST(parsed)
	c.Package = pkg
	return c, nil
}

// countAST counts the exported surface of the parsed files of one package.
func countAST(files []*ast.File) Count {
	var c Count
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil || exportedReceiver(d.Recv) {
					c.Identifiers++
				}
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								c.Identifiers++
							}
						}
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						c.Identifiers++
						ids, fields := countType(s.Type)
						c.Identifiers += ids
						c.Fields += fields
					}
				}
			}
		}
	}
	return c
}

// countType counts the exported methods of an interface type (as
// identifiers) and the exported fields of a struct type, nested struct
// types included.
func countType(t ast.Expr) (ids, fields int) {
	switch t := t.(type) {
	case *ast.InterfaceType:
		for _, m := range t.Methods.List {
			for _, n := range m.Names {
				if n.IsExported() {
					ids++
				}
			}
		}
	case *ast.StructType:
		for _, f := range t.Fields.List {
			if len(f.Names) == 0 {
				if embeddedExported(f.Type) {
					fields++
				}
				continue
			}
			for _, n := range f.Names {
				if n.IsExported() {
					fields++
					_, nested := countType(f.Type)
					fields += nested
				}
			}
		}
	case *ast.ArrayType:
		return countType(t.Elt)
	case *ast.StarExpr:
		return countType(t.X)
	}
	return ids, fields
}

// embeddedExported reports whether an embedded field's type name is
// exported (the field's name is the type's).
func embeddedExported(t ast.Expr) bool {
	switch t := t.(type) {
	case *ast.Ident:
		return t.IsExported()
	case *ast.StarExpr:
		return embeddedExported(t.X)
	case *ast.SelectorExpr:
		return t.Sel.IsExported()
	case *ast.IndexExpr:
		return embeddedExported(t.X)
	case *ast.IndexListExpr:
		return embeddedExported(t.X)
	}
	return false
}

// exportedReceiver reports whether a method's receiver type is exported.
func exportedReceiver(recv *ast.FieldList) bool {
	if len(recv.List) == 0 {
		return false
	}
	return embeddedExported(recv.List[0].Type)
}

// printTable writes one row per package and the totals.
func printTable(w io.Writer, counts []Count) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "package\tidentifiers\tfields\ttotal\t")
	var ids, fields int
	for _, c := range counts {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", c.Package, c.Identifiers, c.Fields, c.Identifiers+c.Fields)
		ids += c.Identifiers
		fields += c.Fields
	}
	fmt.Fprintf(tw, "total (%d packages)\t%d\t%d\t%d\t\n", len(counts), ids, fields, ids+fields)
	tw.Flush()
}
