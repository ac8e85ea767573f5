package mongolock_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestReadmeProgram checks that the program the README shows is Example,
// which go test compiles and runs: the README's block is example_test.go
// with package main, func main and no Output comment.
func TestReadmeProgram(t *testing.T) {
	example, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	want := string(example)
	for old, new := range map[string]string{
		"package mongolock_test\n": "package main\n",
		"\nfunc Example() {\n":     "\nfunc main() {\n",
	} {
		if !strings.Contains(want, old) {
			t.Fatalf("example_test.go has no %q", old)
		}
		want = strings.Replace(want, old, new, 1)
	}
	want = regexp.MustCompile(`(?m)^\t// Output:\n(\t//.*\n)*`).ReplaceAllString(want, "")

	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "```go\npackage main\n")
	if !ok {
		t.Fatal("README.md has no ```go block that starts with package main")
	}
	block, _, ok = strings.Cut(block, "```\n")
	if !ok {
		t.Fatal("README.md's program block does not end")
	}
	got := "package main\n" + block
	if got == want {
		return
	}
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("README.md's program differs from example_test.go's Example at its line %d:\nREADME:  %q\nexample: %q", i+1, gl, wl)
		}
	}
}

// TestDocumentLinks checks the relative links of the README, the changelog
// and docs/: each names a file or directory of the repository, and each
// #fragment a heading of the Markdown file it points to, as GitHub makes
// its anchors.
func TestDocumentLinks(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	docs = append([]string{"README.md", "CHANGELOG.md"}, docs...)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, doc := range docs {
		src, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range prose(string(src)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, frag, _ := strings.Cut(target, "#")
				file := doc
				if path != "" {
					file = filepath.Join(filepath.Dir(doc), path)
					if _, err := os.Stat(file); err != nil {
						t.Errorf("%s: link %q: %v", doc, target, err)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(file, ".md") {
					t.Errorf("%s: link %q: a fragment of a file that is not Markdown", doc, target)
					continue
				}
				anchors, err := headingAnchors(file)
				if err != nil {
					t.Fatal(err)
				}
				if !anchors[frag] {
					t.Errorf("%s: link %q: %s has no heading with anchor #%s", doc, target, file, frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found")
	}
}

// prose returns the lines of a Markdown document outside its fenced code
// blocks.
func prose(src string) []string {
	var out []string
	fenced := false
	for line := range strings.Lines(src) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown file: lower case, punctuation dropped, spaces as hyphens, and
// -1, -2... after repeats.
func headingAnchors(file string) (map[string]bool, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(string(src)) {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		text = strings.TrimSpace(strings.TrimLeft(text, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			anchors[a+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors, nil
}
