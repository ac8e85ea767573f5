package scheduler

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The protocol must stay small enough to check by reading (issue 27):
// no function of the package over 80 lines, and the protocol section of
// the package doc (Firings and claims to Misfires) within 150 lines, the
// promise before it.
func TestProtocolReadable(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > 80 {
					t.Errorf("%s: %s is %d lines long, over 80", name, fd.Name.Name, n)
				}
			}
		}
	}
	raw, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Split(string(raw), "\n")
	at := func(line string) int {
		for i, l := range doc {
			if l == line {
				return i
			}
		}
		t.Fatalf("doc.go has no line %q", line)
		return 0
	}
	from, to := at("// # Firings and claims"), at("// # Control")
	if n := to - from - 1; n > 150 {
		t.Errorf("the protocol section of the package doc is %d lines, over 150", n)
	}
	if promise := at("//\tEvery firing runs at most once; a firing that can start within the"); promise > from {
		t.Errorf("the promise (line %d) comes after the protocol (line %d)", promise+1, from+1)
	}
}
