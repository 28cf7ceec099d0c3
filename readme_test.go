package mlx5kit_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The programs in README.md are the examples in example_test.go, which go
// test runs and checks against their Output, character for character; and
// the first of them needs at most three of the kit's packages.
func TestReadmeExamples(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	src, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```go\n(func Example[^\n]*\n.*?\n})\n```").FindAllStringSubmatch(string(readme), -1)
	require.Len(t, blocks, 2, "README.md shows Example and Example_rawRings")
	for i, name := range []string{"Example", "Example_rawRings"} {
		start := strings.Index(string(src), "func "+name+"() {")
		require.GreaterOrEqual(t, start, 0, "%s in example_test.go", name)
		end := strings.Index(string(src)[start:], "\n}\n")
		require.Greater(t, end, 0)
		require.Equal(t, string(src)[start:start+end+2], blocks[i][1], "README.md's %s differs from example_test.go", name)
	}
	// The kit's packages the first program names.
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "example_test.go", src, parser.SkipObjectResolution)
	require.NoError(t, err)
	imports := map[string]bool{}
	for _, im := range file.Imports {
		path, err := strconv.Unquote(im.Path.Value)
		require.NoError(t, err)
		if strings.HasPrefix(path, "github.com/mlx5kit/mlx5kit") {
			imports[path[strings.LastIndex(path, "/")+1:]] = true
		}
	}
	used := map[string]bool{}
	for _, d := range file.Decls {
		if f, ok := d.(*ast.FuncDecl); ok && f.Name.Name == "Example" {
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := sel.X.(*ast.Ident); ok && imports[id.Name] {
						used[id.Name] = true
					}
				}
				return true
			})
		}
	}
	require.NotEmpty(t, used)
	require.LessOrEqual(t, len(used), 3, "the first program needs %v", used)
}
