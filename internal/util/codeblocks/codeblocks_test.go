package codeblocks

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       []Block
		err        string
	}{
		{name: "two blocks, a marker", text: "x\n<!-- not run: no server -->\n```sql\nSELECT 1;\n```\ntext\n```\nout\n```\n",
			want: []Block{{File: "f.md", Line: 3, Lang: "sql", Text: "SELECT 1;\n", Marker: "not run: no server"}, {File: "f.md", Line: 7, Text: "out\n"}}},
		{name: "indented in a list", text: "1. run:\n   ```sh\n   go run ./x\n   ```\n",
			want: []Block{{File: "f.md", Line: 2, Lang: "sh", Text: "go run ./x\n"}}},
		{name: "unclosed", text: "```go\nx := 1\n", err: "f.md:1: the block has no closing fence"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := Parse("f.md", c.text)
			if c.err != "" {
				require.EqualError(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestGoKind(t *testing.T) {
	require.Equal(t, GoProgram, GoKind("// Command x.\npackage main\n"))
	require.Equal(t, GoImports, GoKind("import (\n\t\"x\"\n)\n"))
	require.Equal(t, GoFragment, GoKind("x := 1\n"))
}

func TestSnippets(t *testing.T) {
	src, err := Snippets("s", []Block{
		{File: "a.md", Line: 1, Lang: "go", Text: "package main\n"},
		{File: "a.md", Line: 5, Lang: "go", Text: "d := 3 * time.Second // three\nlog.Print(d)\n"},
		{File: "a.md", Line: 9, Lang: "sh", Text: "go run .\n"},
	})
	require.NoError(t, err)
	require.Equal(t, SnippetsHeader+`
// Each function is a Go block of the docs: the file and its rank there.

package s

import (
	"log"
	"time"
)

// a.md, Go block 2
func _() {
	d := 3 * time.Second // three
	_ = d
	log.Print(d)
}
`, string(src))

	_, err = Snippets("s", []Block{{File: "a.md", Line: 5, Lang: "go", Text: "if x { ... }\n"}})
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "a.md:5: a Go block that does not parse as statements"), err.Error())
}
