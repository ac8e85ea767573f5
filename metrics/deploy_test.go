package metrics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// The alert rules and the dashboard in deploy/ are checked here without
// Prometheus's own parsers (github.com/prometheus/prometheus is too large a
// dependency for a test): the rule file is decoded strictly, durations,
// label names and annotation templates are parsed as Prometheus does, and
// each expression is tokenized and checked against what Metrics exports —
// every metric name, every label in a matcher or a grouping, and every
// value a fixed-valued label is compared with.

const deployDir = "../deploy"

type ruleFile struct {
	Groups []ruleGroup `yaml:"groups"`
}

type ruleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval"`
	Rules    []rule `yaml:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func TestAlertRules(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(deployDir, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	ex := newExported(t)
	if len(f.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	groups := map[string]bool{}
	alerts := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q empty or repeated", g.Name)
		}
		groups[g.Name] = true
		if g.Interval != "" {
			if _, err := model.ParseDuration(g.Interval); err != nil {
				t.Errorf("group %s: interval: %v", g.Name, err)
			}
		}
		for _, r := range g.Rules {
			name := r.Alert + r.Record
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("rule %q: exactly one of alert and record", name)
				continue
			}
			if r.Record != "" && !model.IsValidMetricName(model.LabelValue(r.Record)) {
				t.Errorf("record %q: invalid metric name", r.Record)
			}
			if r.Alert != "" && alerts[r.Alert] {
				t.Errorf("alert %s twice", r.Alert)
			}
			alerts[r.Alert] = true
			if r.For != "" {
				if _, err := model.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for: %v", name, err)
				}
			}
			for k := range r.Labels {
				if !model.LabelName(k).IsValid() {
					t.Errorf("%s: invalid label name %q", name, k)
				}
			}
			for k, v := range r.Annotations {
				if !model.LabelName(k).IsValid() {
					t.Errorf("%s: invalid annotation name %q", name, k)
				}
				if err := checkTemplate(v); err != nil {
					t.Errorf("%s: annotation %s: %v", name, k, err)
				}
			}
			if err := ex.checkExpr(r.Expr); err != nil {
				t.Errorf("%s: %v\n%s", name, err, r.Expr)
			}
		}
	}
	// The alerts issue #13 asks for.
	for _, a := range []string{"MongolockLeaderMissing", "MongolockJobNotSucceeded", "MongolockJobNeverSucceeded",
		"MongolockRenewalsFailing", "MongolockFiringsSkipped"} {
		if !alerts[a] {
			t.Errorf("no alert %s", a)
		}
	}
}

// checkTemplate parses an annotation as Prometheus does: text/template,
// with its variables defined and its functions (stubbed).
func checkTemplate(text string) error {
	const header = "{{$labels := .Labels}}{{$externalLabels := .ExternalLabels}}{{$externalURL := .ExternalURL}}{{$value := .Value}}"
	funcs := template.FuncMap{}
	for _, f := range []string{"query", "first", "label", "value", "strvalue", "args", "reReplaceAll", "safeHtml",
		"match", "title", "toUpper", "toLower", "graphLink", "tableLink", "sortByLabel", "stripPort", "stripDomain",
		"humanize", "humanize1024", "humanizeDuration", "humanizePercentage", "humanizeTimestamp", "toTime",
		"pathPrefix", "externalURL", "parseDuration"} {
		funcs[f] = func(...any) any { return nil }
	}
	_, err := template.New("annotation").Funcs(funcs).Parse(header + text)
	return err
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "mongolock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title      string `json:"title"`
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("mongolock.json: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Error("dashboard without title or uid")
	}
	ex := newExported(t)
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
		q, _ := v.Query.(map[string]any)
		if v.Type != "query" || q == nil {
			continue
		}
		// label_values(metric, label)
		m := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`).FindStringSubmatch(fmt.Sprint(q["query"]))
		if m == nil {
			t.Errorf("variable %s: query %v", v.Name, q["query"])
			continue
		}
		if d, ok := ex.defs[m[1]]; !ok || !slices.Contains(d.labels, m[2]) {
			t.Errorf("variable %s: no metric %s with label %s", v.Name, m[1], m[2])
		}
	}
	ids := map[int]bool{}
	exprs := 0
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				exprs++
				expr, err := grafanaVars(tg.Expr, vars)
				if err == nil {
					err = ex.checkExpr(expr)
				}
				if err != nil {
					t.Errorf("panel %q: %v\n%s", p.Title, err, tg.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	if exprs == 0 {
		t.Error("no queries")
	}
	// Every metric is on the dashboard.
	var all strings.Builder
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				all.WriteString(tg.Expr + "\n")
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	for name := range ex.defs {
		if !regexp.MustCompile(`\b` + name + `(_bucket|_sum|_count)?\b`).MatchString(all.String()) {
			t.Errorf("%s is not on the dashboard", name)
		}
	}
}

type panel struct {
	ID      int    `json:"id"`
	Type    string `json:"type"`
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

// grafanaVars replaces Grafana's variables: intervals by a duration, the
// others (inside label matchers' strings) by a regexp.
func grafanaVars(expr string, vars map[string]bool) (string, error) {
	var bad error
	out := regexp.MustCompile(`\$\{?(\w+)\}?`).ReplaceAllStringFunc(expr, func(v string) string {
		name := strings.Trim(v, "${}")
		switch {
		case !vars[name]:
			bad = fmt.Errorf("unknown variable %s", v)
		case strings.HasPrefix(name, "__"):
			return "5m"
		}
		return ".*"
	})
	return out, bad
}

// exported is what Metrics exports: its metrics by name, and the values
// each fixed-valued label takes (all present at zero once a job and an
// election are added).
type exported struct {
	defs   map[string]def
	values map[string]map[string][]string // metric → label → values
}

// Labels every target has, and the histogram bucket label.
var targetLabels = []string{"job", "instance"}

func newExported(t *testing.T) *exported {
	t.Helper()
	m := newMetrics(t)
	m.AddJobs("j")
	m.AddElections("e")
	ex := &exported{defs: map[string]def{}, values: map[string]map[string][]string{}}
	for _, d := range m.defs {
		ex.defs[d.name] = d
	}
	for key := range gather(t, m) {
		name, labels, _ := strings.Cut(strings.TrimSuffix(key, "}"), "{")
		for _, suf := range []string{"_count", "_sum"} {
			if n, ok := strings.CutSuffix(name, suf); ok && ex.defs[n].kind == "histogram" {
				name = n
			}
		}
		if ex.values[name] == nil {
			ex.values[name] = map[string][]string{}
		}
		for _, lv := range strings.Split(labels, ",") {
			if k, v, ok := strings.Cut(lv, "="); ok {
				v = strings.Trim(v, `"`)
				if !slices.Contains(ex.values[name][k], v) {
					ex.values[name][k] = append(ex.values[name][k], v)
				}
			}
		}
	}
	return ex
}

// metric resolves a name in an expression to the metric it reads, and
// whether it reads histogram buckets.
func (ex *exported) metric(name string) (d def, bucket bool, err error) {
	if d, ok := ex.defs[name]; ok {
		if d.kind == "histogram" {
			return d, false, fmt.Errorf("histogram %s used without _bucket, _sum or _count", name)
		}
		return d, false, nil
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if n, ok := strings.CutSuffix(name, suf); ok {
			if d, ok := ex.defs[n]; ok && d.kind == "histogram" {
				return d, suf == "_bucket", nil
			}
		}
	}
	return def{}, false, fmt.Errorf("no metric %s", name)
}

// PromQL's functions and aggregations used by the rules and the dashboard;
// extend as needed.
var promqlFuncs = []string{"sum", "max", "min", "avg", "count", "topk", "bottomk", "quantile", "rate", "irate",
	"increase", "delta", "histogram_quantile", "time", "vector", "scalar", "absent", "max_over_time", "min_over_time",
	"avg_over_time", "changes", "resets", "clamp_min", "clamp_max", "label_replace"}

var promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
	"bool", "offset"}

// labelLists are the keywords followed by a list of labels.
var labelLists = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}

var promqlToken = regexp.MustCompile(`^(?:` +
	`(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`" + `)|` +
	`(?P<dur>\d+(?:ms|[smhdwy]))|` +
	`(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|` +
	`(?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)|` +
	`(?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=,(){}\[\]:])|` +
	`(?P<space>\s+))`)

type promToken struct{ kind, text string }

func tokenize(expr string) ([]promToken, error) {
	var out []promToken
	names := promqlToken.SubexpNames()
	for rest := expr; rest != ""; {
		m := promqlToken.FindStringSubmatchIndex(rest)
		if m == nil {
			return nil, fmt.Errorf("cannot read %q", rest)
		}
		for i := 1; i < len(names); i++ {
			if m[2*i] >= 0 {
				if names[i] != "space" {
					out = append(out, promToken{names[i], rest[m[2*i]:m[2*i+1]]})
				}
				break
			}
		}
		rest = rest[m[1]:]
	}
	return out, nil
}

// checkExpr checks that expr tokenizes, that its brackets balance, that
// its identifiers are known functions, keywords or metrics Metrics exports,
// that the labels it matches on and groups by exist, and that the values
// it compares fixed-valued labels with are values they take.
func (ex *exported) checkExpr(expr string) error {
	toks, err := tokenize(expr)
	if err != nil {
		return err
	}
	if len(toks) == 0 {
		return fmt.Errorf("empty expression")
	}
	var stack []string
	pairs := map[string]string{")": "(", "}": "{", "]": "["}
	var used []def // metrics the expression reads
	buckets := false
	var grouping [][]string
	for i := 0; i < len(toks); i++ {
		tk := toks[i]
		next := func(k int) promToken {
			if i+k < len(toks) {
				return toks[i+k]
			}
			return promToken{}
		}
		switch {
		case tk.text == "(" || tk.text == "{" || tk.text == "[":
			stack = append(stack, tk.text)
		case pairs[tk.text] != "":
			if len(stack) == 0 || stack[len(stack)-1] != pairs[tk.text] {
				return fmt.Errorf("unbalanced %s", tk.text)
			}
			stack = stack[:len(stack)-1]
		case tk.kind == "dur" && (len(stack) == 0 || stack[len(stack)-1] != "["):
			return fmt.Errorf("duration %s outside a range", tk.text)
		case tk.kind != "ident":
		case slices.Contains(promqlKeywords, tk.text):
			if slices.Contains(labelLists, tk.text) && next(1).text == "(" {
				var labels []string
				j := i + 2
				for ; j < len(toks) && toks[j].text != ")"; j++ {
					if toks[j].kind == "ident" {
						labels = append(labels, toks[j].text)
					} else if toks[j].text != "," {
						return fmt.Errorf("%s (...): unexpected %q", tk.text, toks[j].text)
					}
				}
				grouping = append(grouping, labels)
				i = j
			}
		case next(1).text == "(":
			if !slices.Contains(promqlFuncs, tk.text) {
				return fmt.Errorf("unknown function %s", tk.text)
			}
			stack = append(stack, "(")
			i++
		case slices.Contains(promqlFuncs, tk.text) && slices.Contains(labelLists, next(1).text):
			// sum by (labels) (expr)
		default:
			d, bucket, err := ex.metric(tk.text)
			if err != nil {
				return err
			}
			used = append(used, d)
			buckets = buckets || bucket
			if next(1).text != "{" {
				continue
			}
			// Matchers: label op "value", ...
			j := i + 2
			for ; j+2 < len(toks) && toks[j].text != "}"; j += 3 {
				l, op, v := toks[j], toks[j+1], toks[j+2]
				if l.kind != "ident" || !slices.Contains([]string{"=", "!=", "=~", "!~"}, op.text) || v.kind != "str" {
					return fmt.Errorf("%s: bad matcher %s %s %s", d.name, l.text, op.text, v.text)
				}
				if !slices.Contains(d.labels, l.text) && !(bucket && l.text == "le") && !slices.Contains(targetLabels, l.text) {
					return fmt.Errorf("%s has no label %s", d.name, l.text)
				}
				value := strings.Trim(v.text, "\"'`")
				if vals, fixed := ex.values[d.name][l.text]; fixed && (op.text == "=" || op.text == "!=") &&
					!fixedFree(l.text) && !slices.Contains(vals, value) {
					return fmt.Errorf("%s{%s}: %q is not one of %q", d.name, l.text, value, vals)
				}
				if j+3 < len(toks) && toks[j+3].text == "," {
					j++
				}
			}
			if j >= len(toks) || toks[j].text != "}" {
				return fmt.Errorf("%s: unterminated matchers", d.name)
			}
			i = j
		}
	}
	if len(stack) != 0 {
		return fmt.Errorf("unclosed %s", stack[len(stack)-1])
	}
	for _, labels := range grouping {
		for _, l := range labels {
			ok := slices.Contains(targetLabels, l) || (buckets && l == "le")
			for _, d := range used {
				ok = ok || slices.Contains(d.labels, l)
			}
			if !ok {
				return fmt.Errorf("no metric of the expression has label %s", l)
			}
		}
	}
	if len(used) == 0 && !strings.Contains(expr, "time()") {
		return fmt.Errorf("reads no metric")
	}
	return nil
}

// fixedFree reports labels whose values are the user's (job names, lock
// ids): any value may be compared with them.
func fixedFree(label string) bool { return label == "job_name" || label == "election" }

// TestCheckExprCatches: the checker rejects what it is for.
func TestCheckExprCatches(t *testing.T) {
	t.Parallel()
	ex := newExported(t)
	for _, bad := range []string{
		`mongolock_lock_acquisitions`,
		`sum(rate(mongolock_lock_acquisitions_total[5m])`,
		`mongolock_lock_acquisitions_total{outcome="acquired"}`,
		`mongolock_lock_acquisitions_total{result="granted"}`,
		`mongolock_job_firings_total{outcome="skipped", reason="busy_elsewhere"}`,
		`sum by (job_name) (mongolock_lock_leases_held)`,
		`mongolock_lock_acquire_duration_seconds > 1`,
		`histogram_quantile(0.9, rate(mongolock_lock_leases_held_bucket[5m]))`,
		`rate(mongolock_lock_renewals_total[5x])`,
		`frobnicate(mongolock_lock_leases_held)`,
		`mongolock_lock_leases_held 5m`,
	} {
		if err := ex.checkExpr(bad); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	for _, good := range []string{
		`sum by (job, instance, le) (rate(mongolock_lock_acquire_duration_seconds_bucket[5m]))`,
		`sum(rate(mongolock_lock_renewals_total{result="failed"}[5m])) by (instance) and (max by (job_name) (mongolock_job_consecutive_failures) > 0)`,
		`mongolock_job_firings_total{job_name="any", outcome="skipped", reason!="stopping"}`,
		`time() - max by (job_name) (mongolock_job_last_success_timestamp_seconds) > 3 * 3600`,
	} {
		if err := ex.checkExpr(good); err != nil {
			t.Errorf("rejected %s: %v", good, err)
		}
	}
}

// TestDeployWithPromtool checks the rules, their unit tests and the
// dashboard's queries with Prometheus's own parser, promtool, where it is
// installed (Debian: apt-get install prometheus).
func TestDeployWithPromtool(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed")
	}
	dir := filepath.Join(deployDir, "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// The dashboard's queries, as recording rules.
	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "mongolock.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	var rules []map[string]string
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				expr := regexp.MustCompile(`\$__\w+`).ReplaceAllString(tg.Expr, "5m")
				expr = regexp.MustCompile(`\$\w+`).ReplaceAllString(expr, ".*")
				rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:query%d", len(rules)), "expr": expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	out, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.yml")
	if err := os.WriteFile(file, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules (dashboard queries): %v\n%s", err, out)
	}
}
