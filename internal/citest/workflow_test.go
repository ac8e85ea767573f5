package citest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// root is the repository's root, relative to this package's directory (the
// working directory of its tests).
const root = "../.."

// envURI is the variable that points the suite at a MongoDB server.
const envURI = "MONGODB_URI"

// workflowFiles returns the workflow files under .github/workflows.
func workflowFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"*.yml", "*.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, ".github", "workflows", pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no workflow in .github/workflows")
	}
	return files
}

// TestWorkflowsLint lints every workflow with actionlint (through the
// lintworkflows program beside this file): syntax, expressions, job and step
// keys, the inputs and versions of well-known actions, runner labels, and,
// when shellcheck is installed, every run: script.
func TestWorkflowsLint(t *testing.T) {
	shellcheck := findShellcheck(t)
	files := workflowFiles(t)
	for _, e := range lint(t, root, shellcheck, files) {
		t.Error(e)
	}
	t.Logf("linted %d workflow file(s), shellcheck=%q", len(files), shellcheck)
}

// TestLintCatches makes sure the lint reports errors, not only passes.
func TestLintCatches(t *testing.T) {
	dir := t.TempDir()
	wf := filepath.Join(dir, ".github", "workflows", "bad.yml")
	if err := os.MkdirAll(filepath.Dir(wf), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := `on: push
jobs:
  test:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/setup-go@v6
        with:
          go-version-fle: go.mod
      - run: echo ${{ matrix.nosuch }}
      - run: echo $HOME/$1
`
	if err := os.WriteFile(wf, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	shellcheck := findShellcheck(t)
	want := []string{`input "go-version-fle" is not defined`, `property "nosuch" is not defined`}
	if shellcheck != "" {
		want = append(want, "SC2086")
	}
	got := strings.Join(lint(t, dir, shellcheck, []string{wf}), "\n")
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("lint of a bad workflow does not report %q; it reported:\n%s", w, got)
		}
	}
}

// findShellcheck returns the shellcheck executable, or "" if there is none.
func findShellcheck(t *testing.T) string {
	path, err := exec.LookPath("shellcheck")
	if err != nil {
		t.Log("shellcheck is not installed: run: scripts are linted by actionlint alone")
		return ""
	}
	return path
}

// lint runs lintworkflows on files of the repository at dir and returns its
// errors as "file:line:col: message [kind]", file relative to dir.
func lint(t *testing.T, dir, shellcheck string, files []string) []string {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"run", ".", "-root", abs, "-shellcheck", shellcheck}
	for _, f := range files {
		a, err := filepath.Abs(f)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, a)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = "lintworkflows" // a module of its own
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var exit *exec.ExitError
	if runErr != nil && (!errors.As(runErr, &exit) || exit.ExitCode() != 1) {
		t.Fatalf("lintworkflows: %v\n%s", runErr, stderr.Bytes())
	}
	var found []string
	for line := range bytes.Lines(stdout.Bytes()) {
		var e struct {
			Message, Filepath, Kind string
			Line, Column            int
		}
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatalf("lintworkflows printed %q: %v", line, err)
		}
		rel, err := filepath.Rel(abs, e.Filepath)
		if err != nil {
			rel = e.Filepath
		}
		found = append(found, fmt.Sprintf("%s:%d:%d: %s [%s]", rel, e.Line, e.Column, e.Message, e.Kind))
	}
	if runErr != nil && len(found) == 0 {
		t.Fatalf("lintworkflows failed and reported no error\n%s", stderr.Bytes())
	}
	return found
}

// workflow is the part of a workflow file these tests read.
type workflow struct {
	Env  map[string]string `yaml:"env"`
	Jobs map[string]struct {
		Env   map[string]string `yaml:"env"`
		Steps []struct {
			Name string            `yaml:"name"`
			Run  string            `yaml:"run"`
			Env  map[string]string `yaml:"env"`
		} `yaml:"steps"`
	} `yaml:"jobs"`
}

// goCommand is one go invocation found in a script.
type goCommand struct {
	args      []string // after "go"
	where     string   // file and job
	withMongo bool     // MONGODB_URI is set for it
}

func (c goCommand) String() string { return "go " + strings.Join(c.args, " ") }

// workflowGoCommands returns the go invocations of every run: step of every
// workflow, jobs in name order.
func workflowGoCommands(t *testing.T) []goCommand {
	t.Helper()
	var cmds []goCommand
	for _, file := range workflowFiles(t) {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var wf workflow
		if err := yaml.Unmarshal(src, &wf); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, id := range slices.Sorted(maps.Keys(wf.Jobs)) {
			job := wf.Jobs[id]
			for i, step := range job.Steps {
				if step.Run == "" {
					continue
				}
				where := fmt.Sprintf("%s job %s step %d %q", filepath.Base(file), id, i+1, step.Name)
				found, err := goCommands(step.Run)
				if err != nil {
					t.Errorf("%s: %v", where, err)
					continue
				}
				mongo := wf.Env[envURI] != "" || job.Env[envURI] != "" || step.Env[envURI] != ""
				for _, args := range found {
					cmds = append(cmds, goCommand{args: args, where: where, withMongo: mongo})
				}
			}
		}
	}
	return cmds
}

// shellKeywords may stand before a command on a line.
var shellKeywords = []string{"if", "then", "else", "elif", "do", "!", "time", "exec"}

// goCommands returns the arguments of each simple command in script whose
// name is go. It understands line continuations, comments, and the
// operators ; && || | between commands, which is all a workflow's go lines
// need; a go command with quoting, expansions or globs is refused, since what
// it runs cannot be known here. Commands inside $( ) are not seen.
func goCommands(script string) ([][]string, error) {
	script = strings.ReplaceAll(script, "\\\n", " ")
	var cmds [][]string
	sc := bufio.NewScanner(strings.NewReader(script))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		for _, seg := range splitOperators(line) {
			words := strings.Fields(seg)
			for len(words) > 0 && slices.Contains(shellKeywords, words[0]) {
				words = words[1:]
			}
			if len(words) == 0 || words[0] != "go" {
				continue
			}
			if strings.ContainsAny(seg, "$`'\"*?") {
				return nil, fmt.Errorf("cannot check %q: quoting, expansions and globs are not understood", strings.TrimSpace(seg))
			}
			if len(words) == 1 {
				return nil, errors.New("go without a subcommand")
			}
			cmds = append(cmds, words[1:])
		}
	}
	return cmds, sc.Err()
}

// splitOperators splits a line at ; && || and |.
func splitOperators(line string) []string {
	for _, op := range []string{"&&", "||", ";", "|"} {
		line = strings.ReplaceAll(line, op, "\n")
	}
	return strings.Split(line, "\n")
}

// ciRunGoCommands returns the go build, vet and test commands of .ci/run.
func ciRunGoCommands(t *testing.T) [][]string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := goCommands(string(src))
	if err != nil {
		t.Fatalf(".ci/run: %v", err)
	}
	var cmds [][]string
	for _, args := range all {
		switch args[0] {
		case "build", "vet", "test":
			cmds = append(cmds, args)
		}
	}
	if len(cmds) == 0 {
		t.Fatal(".ci/run runs no go build, vet or test")
	}
	return cmds
}

// readmeTestCommand returns the README's command for running the tests: the
// first line of a code block that starts with "go test".
func readmeTestCommand(t *testing.T) []string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	inBlock := false
	for line := range strings.Lines(string(src)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock && strings.HasPrefix(line, "go test ") {
			return strings.Fields(line)[1:]
		}
	}
	t.Fatal("README.md shows no go test command in a code block")
	return nil
}

// TestWorkflowRunsTheSuite checks what the workflow runs: the README's test
// command both against MongoDB (MONGODB_URI set) and without it (the
// embedded server), and every go build, vet and test command of .ci/run, so
// the two CI definitions do not drift apart.
func TestWorkflowRunsTheSuite(t *testing.T) {
	cmds := workflowGoCommands(t)
	has := func(args []string, mongo ...bool) bool {
		for _, c := range cmds {
			if slices.Equal(c.args, args) && (len(mongo) == 0 || c.withMongo == mongo[0]) {
				return true
			}
		}
		return false
	}
	readme := readmeTestCommand(t)
	if !has(readme, true) {
		t.Errorf("no job runs the README's %q with %s set", "go "+strings.Join(readme, " "), envURI)
	}
	if !has(readme, false) {
		t.Errorf("no job runs the README's %q without %s (embedded server)", "go "+strings.Join(readme, " "), envURI)
	}
	for _, args := range ciRunGoCommands(t) {
		if !has(args) {
			t.Errorf(".ci/run runs %q, the workflow does not", "go "+strings.Join(args, " "))
		}
	}
}

// TestWorkflowGoCommands checks that every go command of the workflows names
// flags and packages that exist: go build, vet and test are dry-run with -n
// (which loads the packages and checks the flags but builds nothing), the
// flags after a test's -args are given to its test binaries with no test
// selected, and other go commands' flags must appear in their go help text.
func TestWorkflowGoCommands(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range workflowGoCommands(t) {
		if seen[c.String()] {
			continue
		}
		seen[c.String()] = true
		t.Run(c.String(), func(t *testing.T) {
			if err := checkGoCommand(c.args); err != nil {
				t.Errorf("%s: %s: %v", c.where, c, err)
			}
		})
	}
	if len(seen) == 0 {
		t.Fatal("the workflows run no go command")
	}
}

// checkGoCommand checks one go command's arguments without running it.
func checkGoCommand(args []string) error {
	sub := args[0]
	switch sub {
	case "build", "vet", "test":
		before, after := args[1:], []string(nil)
		if i := slices.Index(before, "-args"); i >= 0 {
			before, after = before[:i], before[i+1:]
		}
		if after != nil && sub != "test" {
			return errors.New("-args is a go test flag")
		}
		// A flag the go command does not know ends go test's package
		// list: it and the rest go to the test binary of the package in
		// the current directory, which the dry run below cannot tell from
		// a good command once the repository's root has a package.
		if err := checkFlagsDocumented(sub, before); err != nil {
			return err
		}
		dry := append([]string{sub, "-n"}, before...)
		if out, err := goRun(dry...); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(dry, " "), err, out)
		}
		if len(after) > 0 {
			// The test binaries parse the flags before selecting tests:
			// with none selected, only an unknown flag fails.
			probe := append(append([]string{"test", "-run=^$"}, before...), "-args")
			probe = append(probe, after...)
			if out, err := goRun(probe...); err != nil {
				return fmt.Errorf("go %s: %v\n%s", strings.Join(probe, " "), err, out)
			}
		}
		return nil
	default:
		// go mod tidy -diff and the like: the subcommand words, then flags.
		var words, flags []string
		for _, a := range args {
			if strings.HasPrefix(a, "-") {
				name, _, _ := strings.Cut(a, "=")
				flags = append(flags, name)
			} else if len(flags) == 0 && !strings.ContainsAny(a, "./") {
				words = append(words, a)
			}
		}
		help, err := goRun(append([]string{"help"}, words...)...)
		if err != nil {
			return fmt.Errorf("go help %s: %v\n%s", strings.Join(words, " "), err, help)
		}
		for _, f := range flags {
			if !bytes.Contains(help, []byte(f)) {
				return fmt.Errorf("go help %s does not mention %s", strings.Join(words, " "), f)
			}
		}
		return nil
	}
}

// checkFlagsDocumented checks that every flag in args appears in the go
// command's help for sub (and, for go test, in go help testflag), as build
// flags and test flags do.
func checkFlagsDocumented(sub string, args []string) error {
	topics := [][]string{{"help", sub}, {"help", "build"}}
	if sub == "test" {
		topics = append(topics, []string{"help", "testflag"})
	}
	var help []byte
	for _, topic := range topics {
		out, err := goRun(topic...)
		if err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(topic, " "), err, out)
		}
		help = append(help, out...)
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(a, "=")
		if !bytes.Contains(help, []byte(name)) {
			return fmt.Errorf("go help %s does not mention %s", sub, name)
		}
	}
	return nil
}

// goRun runs the go command in the repository's root. The go command puts
// its own bin directory first on the PATH of the tests it runs.
func goRun(args ...string) ([]byte, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	return cmd.CombinedOutput()
}

// TestGoCommands checks the script parser on the shapes the workflow uses.
func TestGoCommands(t *testing.T) {
	script := `# comment
go build ./...
  go vet ./... # trailing
if go test -count=1 ./...; then echo ok; fi
go test -race -count=1 \
  ./lock/ ./runner/
echo go test | cat && gofmt -l .
`
	got, err := goCommands(script)
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"build", "./..."},
		{"vet", "./..."},
		{"test", "-count=1", "./..."},
		{"test", "-race", "-count=1", "./lock/", "./runner/"},
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("goCommands = %q, want %q", got, want)
	}
	for _, bad := range []string{`go test "$PKG"`, "go test ${{ matrix.pkg }}", "go test ./...*", "go"} {
		if _, err := goCommands(bad); err == nil {
			t.Errorf("goCommands(%q) accepted a command it cannot check", bad)
		}
	}
}

// TestCheckGoCommand makes sure the checks would catch a wrong flag or
// package, not only pass the right ones.
func TestCheckGoCommand(t *testing.T) {
	for _, bad := range [][]string{
		{"test", "-count=1", "./nosuchpackage/"},
		{"test", "-nosuchflag", "./internal/errs/"},
		{"vet", "./nosuchpackage/..."},
		{"mod", "tidy", "-nosuchflag"},
		{"test", "./internal/mongotest/", "-args", "-nosuchflag"},
	} {
		if err := checkGoCommand(bad); err == nil {
			t.Errorf("checkGoCommand(%q) passed", bad)
		}
	}
}
