package scheduler_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestBenchPatternsReport: every -bench pattern the documents give for
// this package reports each benchmark it runs. A pattern that matches a
// benchmark's name only in part (Cluster/(server|jobs=.*)/docs=.* against
// Cluster/server) runs it, to look for sub-benchmarks, and reports
// nothing: minutes spent on a figure nobody sees. The benchmarks are run
// dry (-cluster.dry), by this test binary.
func TestBenchPatternsReport(t *testing.T) {
	t.Parallel()
	docs := []string{filepath.Join("..", "README.md")}
	more, _ := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	docs = append(docs, more...)
	bench := regexp.MustCompile(`go test .*-bench '([^']+)'.* \./scheduler/?(\s|$)`)
	result := regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?$`) // the name, and -GOMAXPROCS when not 1
	checked := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range bench.FindAllStringSubmatch(string(b), -1) {
			pattern := m[1]
			if !strings.Contains(pattern, "Cluster") {
				continue // dry runs are BenchmarkCluster's
			}
			checked++
			out, err := exec.Command(os.Args[0], "-test.run=^$", "-test.bench="+pattern, "-test.benchtime=1x", "-cluster.dry").CombinedOutput()
			if err != nil {
				t.Fatalf("%s: -bench %q: %v\n%s", doc, pattern, err, out)
			}
			var ran, reported []string
			for _, line := range strings.Split(string(out), "\n") {
				if name, ok := strings.CutPrefix(line, clusterDryRan); ok {
					ran = append(ran, name)
				} else if f := strings.Fields(line); len(f) > 2 {
					if m := result.FindStringSubmatch(f[0]); m != nil {
						reported = append(reported, m[1])
					}
				}
			}
			if len(ran) == 0 {
				t.Errorf("%s: -bench %q runs nothing", doc, pattern)
			}
			for _, name := range ran {
				if !slices.Contains(reported, name) {
					t.Errorf("%s: -bench %q runs %s without reporting it", doc, pattern, name)
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no -bench pattern of BenchmarkCluster found in the documents")
	}
}
