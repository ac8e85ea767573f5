package metrics

import (
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/mongolock/mongolock/internal/mongotest"
)

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }

func newMetrics(t testing.TB, opts ...Option) *Metrics {
	t.Helper()
	m, err := New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// snapshot is every series m exports, gathered through a pedantic registry
// (which checks Collect against Describe), by exposed name and labels:
// `name{k="v",...}` with labels sorted and empty ones left out, as
// Prometheus stores them. A histogram gives name_count and name_sum.
type snapshot map[string]float64

func gather(t testing.TB, c prometheus.Collector) snapshot {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			labels := seriesLabels(mt.GetLabel())
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				s[mf.GetName()+labels] = mt.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				s[mf.GetName()+labels] = mt.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				s[mf.GetName()+"_count"+labels] = float64(mt.GetHistogram().GetSampleCount())
				s[mf.GetName()+"_sum"+labels] = mt.GetHistogram().GetSampleSum()
			default:
				t.Fatalf("%s: unexpected type %v", mf.GetName(), mf.GetType())
			}
		}
	}
	return s
}

func seriesLabels(lps []*dto.LabelPair) string {
	var parts []string
	for _, lp := range lps {
		if lp.GetValue() != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
		}
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// series names a series as snapshot does: series("x", "b", "2", "a", "1")
// is `x{a="1",b="2"}`.
func series(name string, kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			parts = append(parts, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
		}
	}
	slices.Sort(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// get returns a series' value; the test fails if it is absent.
func (s snapshot) get(t testing.TB, key string) float64 {
	t.Helper()
	v, ok := s[key]
	if !ok {
		t.Fatalf("no series %s", key)
	}
	return v
}

// want checks the values of series.
func (s snapshot) want(t testing.TB, want map[string]float64) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, ok := s[k]
		switch {
		case !ok:
			t.Errorf("no series %s (want %v)", k, want[k])
		case !near(got, want[k]):
			t.Errorf("%s = %v, want %v", k, got, want[k])
		}
	}
}

// diff returns the series whose value changed from before to after
// (absent counts as zero).
func diff(before, after snapshot) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
