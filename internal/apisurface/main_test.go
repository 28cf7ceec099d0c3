package main

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

const sample = `package p

const (
	A = 1
	b = 2
)

var C, d int

type E struct {
	F, g int
	H    struct{ I, j int }
	*Embedded
	unexported
}

type Embedded struct{}
type unexported struct{ K int }

type L interface {
	M()
	n()
}

func (E) N()   {}
func (E) o()   {}
func (unexported) P() {}
func Q()       {}
func r()       {}
`

func TestCountAST(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", sample, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := countAST([]*ast.File{f})
	// A, C, E, Embedded, L, L.M, E.N, Q.
	if got.Identifiers != 8 {
		t.Errorf("identifiers = %d, want 8", got.Identifiers)
	}
	// E.F, E.H, E.H.I, E.Embedded.
	if got.Fields != 4 {
		t.Errorf("fields = %d, want 4", got.Fields)
	}
}

func TestPublic(t *testing.T) {
	for path, want := range map[string]bool{
		"github.com/mlx5kit/mlx5kit":                     true,
		"github.com/mlx5kit/mlx5kit/rc":                  true,
		"github.com/mlx5kit/mlx5kit/internal/transport":  false,
		"github.com/mlx5kit/mlx5kit/cmd/mlx5kit-perf":    false,
		"github.com/mlx5kit/mlx5kit/internal/prm/detail": false,
	} {
		if got := public(path); got != want {
			t.Errorf("public(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestMeasureModule(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	counts, err := measure([]string{"github.com/mlx5kit/mlx5kit/..."})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]Count{}
	for _, c := range counts {
		if !public(c.Package) {
			t.Errorf("non-public package %s counted", c.Package)
		}
		seen[c.Package] = c
	}
	if c, ok := seen["github.com/mlx5kit/mlx5kit/ctx"]; !ok || c.Identifiers == 0 {
		t.Errorf("ctx missing or empty: %+v", c)
	}
	var buf bytes.Buffer
	printTable(&buf, counts)
	if !strings.Contains(buf.String(), "total (") {
		t.Errorf("table has no total line:\n%s", buf.String())
	}
}

func TestAliasesOfInternal(t *testing.T) {
	const src = `package p

import (
	"github.com/mlx5kit/mlx5kit/ctx"
	v "github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

type A = v.DVAttr
type B = *prm.Opcode
type C = ctx.MTU
type d = prm.Opcode
type E v.DVAttr
type F = []v.GIDTableEntry
`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := aliasesOfInternal(f)
	want := []string{"A = v.DVAttr", "B = *prm.Opcode", "F = []v.GIDTableEntry"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("aliasesOfInternal = %q, want %q", got, want)
	}
}

// aliasesKept are the aliases of internal types the public packages still
// export, and why: the pollers and transports compare these values with
// internal/prm's typed constants on the hot path (a CQE's opcode in
// transport's CompleteSend, inlined into every Poll), where a type of
// their own would need a conversion at each comparison inside functions
// that sit at the inliner's budget.
var aliasesKept = map[string]bool{
	"github.com/mlx5kit/mlx5kit/monocq.CQEOpcode = prm.CQEOpcode": true,
	"github.com/mlx5kit/mlx5kit/monocq.Syndrome = prm.Syndrome":   true,
	"github.com/mlx5kit/mlx5kit/wqebuilder.Opcode = prm.Opcode":   true,
}

// TestNoAliasOfInternalType fails when a public package exports an alias
// of a type of an internal package (other than those of aliasesKept): go
// doc would show the alias alone, with the type's fields and methods where
// the reader cannot go.
func TestNoAliasOfInternalType(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	for _, env := range []string{"1", "0"} {
		t.Setenv("CGO_ENABLED", env)
		found, err := internalAliases([]string{"github.com/mlx5kit/mlx5kit/..."})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range found {
			if aliasesKept[a] {
				continue
			}
			t.Errorf("CGO_ENABLED=%s: %s aliases a type of an internal package: define the type in the public package", env, a)
		}
	}
}
