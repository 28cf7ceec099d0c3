package mlx5kit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/bufpool"
	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// closeOfNil calls Close on a nil pointer of every public type that has a
// Close method; TestCloseOfNil checks that the list is complete.
var closeOfNil = map[string]func() error{
	"bufpool.Pool":                 (*bufpool.Pool)(nil).Close,
	"channel.Channel":              (*channel.Channel)(nil).Close,
	"channel.MultiChannel":         (*channel.MultiChannel)(nil).Close,
	"channel.Prepared":             (*channel.Prepared)(nil).Close,
	"channel.PreparedMulti":        (*channel.PreparedMulti)(nil).Close,
	"completion.Notifier":          (*completion.Notifier)(nil).Close,
	"ctx.AddressHandle":            (*ctx.AddressHandle)(nil).Close,
	"ctx.Buffer":                   (*ctx.Buffer)(nil).Close,
	"ctx.CompletionQueue":          (*ctx.CompletionQueue)(nil).Close,
	"ctx.Context":                  (*ctx.Context)(nil).Close,
	"ctx.MemoryRegion":             (*ctx.MemoryRegion)(nil).Close,
	"ctx.ProtectionDomain":         (*ctx.ProtectionDomain)(nil).Close,
	"ctx.QueuePair":                (*ctx.QueuePair)(nil).Close,
	"ctx.SharedReceiveQueue":       (*ctx.SharedReceiveQueue)(nil).Close,
	"dc.DCI":                       (*dc.DCI)(nil).Close,
	"dc.DCT":                       (*dc.DCT)(nil).Close,
	"dc.Remote":                    (*dc.Remote)(nil).Close,
	"endpoint.MeshListener":        (*endpoint.MeshListener)(nil).Close,
	"endpoint.MeshWatch":           (*endpoint.MeshWatch)(nil).Close,
	"ibpath.AddressCache":          (*ibpath.AddressCache)(nil).Close,
	"rc.QP":                        (*rc.QP)(nil).Close,
	"sim.Fabric":                   (*sim.Fabric)(nil).Close,
	"transport.Poller":             (*transport.Poller)(nil).Close,
	"transport.Queue":              (*transport.Queue)(nil).Close,
	"transport.SharedReceiveQueue": (*transport.SharedReceiveQueue)(nil).Close,
	"ud.QP":                        (*ud.QP)(nil).Close,
	"ud.Remote":                    (*ud.Remote)(nil).Close,
	"wqebuilder.SendQueue":         func() error { (*wqebuilder.SendQueue)(nil).Close(); return nil },
}

// TestCloseOfNil: Close of a nil pointer of any public type returns nil
// without panicking, so that cleanup written before an error check (a
// deferred Close of what a failed constructor returned) is harmless. The
// types are found in the source: every exported type of a public package
// that declares Close with a pointer receiver must be in closeOfNil.
func TestCloseOfNil(t *testing.T) {
	var found []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "internal", "cmd", "testdata", ".git", "scripts", "docs":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || fd.Name.Name != "Close" {
				continue
			}
			star, ok := fd.Recv.List[0].Type.(*ast.StarExpr)
			if !ok {
				continue
			}
			if id, ok := star.X.(*ast.Ident); ok && id.IsExported() {
				found = append(found, f.Name.Name+"."+id.Name)
			}
		}
		return nil
	})
	require.NoError(t, err)
	sort.Strings(found)
	found = slices.Compact(found)
	require.NotEmpty(t, found)
	for _, name := range found {
		require.Contains(t, closeOfNil, name, "add (*%s)(nil).Close to closeOfNil", name)
	}
	for name, closeNil := range closeOfNil {
		require.NotPanics(t, func() { require.NoError(t, closeNil(), name) }, name)
	}
	// The zero values of the types whose zero value is a declared thing
	// to hold (a field of a struct, say) close as nothing.
	require.NotPanics(t, func() {
		require.NoError(t, new(completion.Notifier).Close())
		require.NoError(t, new(bufpool.Pool).Close())
		require.NoError(t, new(endpoint.MeshWatch).Close())
	})
	// Nor does a zero channel, which says so in Err (TestCloseOfNil
	// panicked on a zero MultiChannel or PreparedMulti before).
	require.NotPanics(t, func() {
		require.NoError(t, new(channel.MultiChannel).Close())
		require.NoError(t, new(channel.PreparedMulti).Close())
		require.NoError(t, new(channel.Channel).Close())
		require.ErrorIs(t, new(channel.Channel).Err(), ctx.ErrInvalidArgument)
		require.ErrorIs(t, new(channel.MultiChannel).Err(), ctx.ErrInvalidArgument)
	})
}
