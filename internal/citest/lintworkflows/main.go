// Command lintworkflows lints GitHub Actions workflow files with actionlint
// and prints each error as a line of JSON (actionlint.Error). It exits 1 if
// it found errors and 2 if it could not lint. The tests of package citest run
// it; see there.
//
// It is a module of its own to keep actionlint out of the main module's
// dependency graph: actionlint v1.7.12 compiles only against
// go.yaml.in/yaml/v4 v4.0.0-rc.3, while the main module's compose-go needs
// rc.4, which removed the error types actionlint uses.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rhysd/actionlint"
)

func main() {
	root := flag.String("root", ".", "the repository's root (its .github/actionlint.yaml, if any, applies)")
	shellcheck := flag.String("shellcheck", "", "shellcheck executable to check run: scripts with; empty: none")
	flag.Parse()
	errs, err := lint(*root, *shellcheck, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "lintworkflows:", err)
		os.Exit(2)
	}
	enc := json.NewEncoder(os.Stdout)
	for _, e := range errs {
		if err := enc.Encode(e); err != nil {
			fmt.Fprintln(os.Stderr, "lintworkflows:", err)
			os.Exit(2)
		}
	}
	if len(errs) > 0 {
		os.Exit(1)
	}
}

func lint(root, shellcheck string, files []string) ([]*actionlint.Error, error) {
	if len(files) == 0 {
		return nil, fmt.Errorf("no workflow file given")
	}
	project, err := actionlint.NewProject(root)
	if err != nil {
		return nil, err
	}
	linter, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{
		Color:      actionlint.ColorOptionKindNever,
		Shellcheck: shellcheck,
		WorkingDir: root,
	})
	if err != nil {
		return nil, err
	}
	return linter.LintFiles(files, project)
}
