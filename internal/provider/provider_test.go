package provider_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestCtxExportsNoSeam checks that package ctx declares none of the
// provider seam in its exported API: no Provider* interface, no Register or
// OpenWith, no Handle or Device accessor returning a provider handle, no
// OnClose hook registration (internal/seam.OnClose).
func TestCtxExportsNoSeam(t *testing.T) {
	const dir = "../../ctx"
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
			require.NoError(t, err)
			files = append(files, f)
		}
	}
	require.NotEmpty(t, files, "no ctx sources")
	var found []string
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				name := d.Name.Name
				if d.Recv == nil && (name == "Register" || name == "OpenWith") {
					found = append(found, "func "+name)
				}
				if d.Recv != nil && (name == "Handle" || name == "Device" || name == "OnClose") {
					found = append(found, "method "+name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					if _, iface := ts.Type.(*ast.InterfaceType); iface && strings.HasPrefix(ts.Name.Name, "Provider") {
						found = append(found, "type "+ts.Name.Name)
					}
				}
			}
		}
	}
	require.Empty(t, found, "ctx exports provider seam names")
}

// TestSeamRoundTrip opens a private software HCA through Open and checks
// that the handle accessors return the provider's own objects, the ones
// ctx's objects were created from.
func TestSeamRoundTrip(t *testing.T) {
	f := sim.New(sim.Options{})
	_, isProvider := any(f).(provider.Provider)
	require.False(t, isProvider, "a sim.Fabric exports the provider methods")
	c, err := provider.Open("private", simadopt.Provider(f), "")
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, "private", c.Provider())
	dev := provider.DeviceOf(c)
	require.NotNil(t, dev)
	require.Equal(t, c.DeviceName(), dev.Name())

	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	require.NotNil(t, provider.ProtectionDomainOf(pd))
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	require.NoError(t, err)
	ch := provider.CompletionQueueOf(cq)
	require.NotNil(t, ch)
	require.Equal(t, provider.CQDescriptor(cq), ch.Descriptor())
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 16, MaxSGE: 1})
	require.NoError(t, err)
	require.Equal(t, provider.SRQDescriptor(srq), provider.SRQOf(srq).Descriptor())
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 8, RecvDepth: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	qh := provider.QueuePairOf(qp)
	require.NotNil(t, qh)
	require.Equal(t, qp.QPN(), qh.Descriptor().QPN)

	// A nil provider is refused with ctx's error, not a panic.
	_, err = provider.Open("nil", nil, "")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}
