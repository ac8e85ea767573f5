package cli

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
	"go.yaml.in/yaml/v3"
)

// The repository's deployment files, checked here because no Docker engine
// runs where the tests do: docker-compose.yml as Docker Compose reads it
// (compose-go, with the Compose schema), the Dockerfile and .dockerignore by
// what they must contain, and every mongolock command in them against this
// command's own table and flags.

const repoRoot = ".."

// loadCompose loads docker-compose.yml as `docker compose` would.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "docker-compose.yml")
	content, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := loader.LoadWithContext(ctx, types.ConfigDetails{
		WorkingDir:  root,
		ConfigFiles: []types.ConfigFile{{Filename: file, Content: content}},
		Environment: types.Mapping{},
	})
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("docker-compose.yml has no service %q", name)
	}
	return s
}

// flagValue returns the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		switch {
		case a == "--"+name && i+1 < len(args):
			return args[i+1], true
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"="), true
		}
	}
	return "", false
}

func TestComposeMongo(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	if p.Name != "mongolock" {
		t.Errorf("project name %q", p.Name)
	}
	mongo := service(t, p, "mongo")
	if !strings.HasPrefix(mongo.Image, "mongo:7") {
		t.Errorf("mongo image %q, want MongoDB 7", mongo.Image)
	}
	rs, ok := flagValue(mongo.Command, "replSet")
	if !ok || rs == "" {
		t.Fatalf("mongo command %q has no --replSet", mongo.Command)
	}
	hc := mongo.HealthCheck
	if hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] != "CMD" || hc.Test[1] != "mongosh" {
		t.Fatalf("mongo healthcheck %+v, want mongosh", hc)
	}
	script := strings.Join(hc.Test, " ")
	for _, w := range []string{
		"rs.initiate(",                    // initiates the set
		"_id: '" + rs + "'",               // the set named on the command line
		"host: 'mongo:27017'",             // by the name the apps resolve
		"isWritablePrimary) { quit(1) }",  // healthy only once writes work
		"try { rs.status() } catch (e) {", // initiates only once
	} {
		if !strings.Contains(script, w) {
			t.Errorf("healthcheck lacks %q: %s", w, script)
		}
	}
	if hc.Retries == nil || hc.Interval == nil || time.Duration(*hc.Interval)*time.Duration(*hc.Retries) < 30*time.Second {
		t.Error("the healthcheck gives the replica set less than 30s to elect a primary")
	}
}

func TestComposeServices(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	rs, _ := flagValue(service(t, p, "mongo").Command, "replSet")

	migrate := service(t, p, "migrate")
	if d, ok := migrate.DependsOn["mongo"]; !ok || d.Condition != types.ServiceConditionHealthy {
		t.Errorf("migrate depends on mongo %+v, want %s", migrate.DependsOn, types.ServiceConditionHealthy)
	}
	if !slices.Equal(migrate.Command[:2], []string{"migrate", "up"}) {
		t.Errorf("migrate runs %q", migrate.Command)
	}
	if migrate.Restart != "" && migrate.Restart != types.RestartPolicyNo {
		t.Errorf("the one-shot migrate restarts: %q", migrate.Restart)
	}

	mongolock := []string{"migrate"}
	for _, name := range []string{"app1", "app2", "app3"} {
		app := service(t, p, name)
		mongolock = append(mongolock, name)
		if d, ok := app.DependsOn["migrate"]; !ok || d.Condition != types.ServiceConditionCompletedSuccessfully {
			t.Errorf("%s depends on migrate %+v, want %s", name, app.DependsOn, types.ServiceConditionCompletedSuccessfully)
		}
		if app.Command[0] != "demo-instance" {
			t.Errorf("%s runs %q, want demo-instance", name, app.Command)
		}
		if n, _ := flagValue(app.Command, "name"); n != name {
			t.Errorf("%s calls itself %q in its output", name, n)
		}
		if _, ok := flagValue(app.Command, "for"); ok {
			t.Errorf("%s does not run until stopped", name)
		}
	}

	for _, name := range mongolock {
		s := service(t, p, name)
		if s.Build == nil || s.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s is not built from the Dockerfile: %+v", name, s.Build)
		} else if root, _ := filepath.Abs(repoRoot); s.Build.Context != root {
			t.Errorf("%s build context %s, want the repository root %s", name, s.Build.Context, root)
		}
		var uri string
		if v := s.Environment["MONGODB_URI"]; v != nil {
			uri = *v
		}
		if !strings.Contains(uri, "mongo:27017") || !strings.Contains(uri, "replicaSet="+rs) {
			t.Errorf("%s MONGODB_URI %q, want the replica set %s at mongo:27017", name, uri, rs)
		}
	}
	// The instances agree on the lease TTL, so that a failover takes as
	// long whichever of them led. Nothing else needs to: the lock
	// collection's indexes do not depend on it, and leases of different
	// TTLs share it safely.
	var ttl string
	for _, name := range mongolock[1:] {
		v, ok := flagValue(service(t, p, name).Command, "ttl")
		switch {
		case !ok:
			t.Errorf("%s sets no --ttl", name)
		case ttl == "":
			ttl = v
		case v != ttl:
			t.Errorf("%s --ttl %s, others %s", name, v, ttl)
		}
	}
}

// TestComposeCommandsExist runs every mongolock command of the compose file
// through this command's parser with -h: a renamed command or flag fails here.
func TestComposeCommandsExist(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	for _, name := range []string{"migrate", "app1", "app2", "app3"} {
		args := service(t, p, name).Command
		cmd, ok := find(testApp().commands(), args[0])
		if !ok {
			t.Errorf("%s runs unknown command %q", name, args[0])
			continue
		}
		path := []string{args[0]}
		if cmd.sub != nil {
			if _, ok := find(cmd.sub, args[1]); !ok {
				t.Errorf("%s runs unknown command %q %q", name, args[0], args[1])
				continue
			}
			path = append(path, args[1])
		}
		r := cli(t, append(path, "-h")...)
		if r.code != ExitOK {
			t.Fatalf("%s -h: %v", strings.Join(path, " "), r)
		}
		for _, a := range args[len(path):] {
			if !strings.HasPrefix(a, "--") {
				continue
			}
			flag, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(flag) + `\b`).MatchString(r.stdout) {
				t.Errorf("%s: %s has no flag --%s", name, strings.Join(path, " "), flag)
			}
		}
	}
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	build := regexp.MustCompile(`(?m)go build .*-o (\S+) (\./cmd/mongolock)\s*$`).FindStringSubmatch(strings.ReplaceAll(df, "\\\n", " "))
	if build == nil {
		t.Fatal("the Dockerfile builds no ./cmd/mongolock")
	}
	if !regexp.MustCompile(`(?m)^FROM golang:\S+ AS build$`).MatchString(df) {
		t.Error("no golang build stage")
	}
	stages := regexp.MustCompile(`(?m)^FROM `).FindAllString(df, -1)
	if len(stages) < 2 || !strings.Contains(df, "COPY --from=build "+build[1]+" ") {
		t.Error("the runtime stage does not copy the built binary")
	}
	if !regexp.MustCompile(`(?m)^ENTRYPOINT \["[^"]*/mongolock"\]$`).MatchString(df) {
		t.Error("the entrypoint is not the mongolock binary")
	}
	if !strings.Contains(df, "CGO_ENABLED=0") {
		t.Error("the binary is not static: the runtime image has no C library")
	}
	if !regexp.MustCompile(`(?m)^USER \S+`).MatchString(df) {
		t.Error("the image runs as root")
	}

	// .dockerignore must keep everything the build needs.
	f, err := os.Open(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patterns, err := ignorefile.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []string{"go.mod", "go.sum", "cmd/mongolock/main.go", "cli/cli.go", "devserver/devserver.go", "lock/lock.go", "internal/embedded/embedded.go", "migrations/migrator.go"} {
		if out, err := pm.MatchesOrParentMatches(keep); err != nil || out {
			t.Errorf(".dockerignore excludes %s (%v)", keep, err)
		}
	}
	for _, drop := range []string{".git/config", "mongolock", "cmd/mongolock/mongolock.test"} {
		if out, _ := pm.MatchesOrParentMatches(drop); !out {
			t.Errorf(".dockerignore keeps %s in the build context", drop)
		}
	}
}

// TestDockerComposeConfig asks Docker Compose itself, where it is installed.
func TestDockerComposeConfig(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("no docker CLI")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err != nil {
		t.Skip("no docker compose plugin")
	}
	cmd := exec.CommandContext(ctx, "docker", "compose", "-f", filepath.Join(repoRoot, "docker-compose.yml"), "config", "--quiet")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker compose config: %v\n%s", err, out)
	}
}

// TestComposeObservability: each app instance serves /metrics and the
// health checks on a port of its own, and the Prometheus service scrapes
// exactly those, with mongolock's alert rules.
func TestComposeObservability(t *testing.T) {
	t.Parallel()
	p := loadCompose(t)
	var targets []string
	for _, name := range []string{"app1", "app2", "app3"} {
		app := service(t, p, name)
		addr, ok := flagValue(app.Command, "http")
		if !ok || addr != ":8080" {
			t.Errorf("%s --http %q, want :8080", name, addr)
		}
		if len(app.Ports) != 1 || app.Ports[0].Target != 8080 {
			t.Errorf("%s publishes %+v, want its port 8080", name, app.Ports)
		}
		targets = append(targets, name+":8080")
	}
	prom := service(t, p, "prometheus")
	mounted := map[string]string{}
	for _, v := range prom.Volumes {
		if _, err := os.Stat(v.Source); err != nil {
			t.Errorf("prometheus mounts %s: %v", v.Source, err)
		}
		mounted[v.Target] = v.Source
	}
	cfgFile, ok := mounted["/etc/prometheus/prometheus.yml"]
	if !ok {
		t.Fatalf("prometheus mounts no /etc/prometheus/prometheus.yml: %+v", prom.Volumes)
	}
	b, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			got = append(got, st.Targets...)
		}
	}
	if !slices.Equal(got, targets) {
		t.Errorf("prometheus scrapes %v, want %v", got, targets)
	}
	for _, r := range cfg.RuleFiles {
		if _, ok := mounted[path.Join("/etc/prometheus", r)]; !ok {
			t.Errorf("rule file %s is not mounted", r)
		}
	}
}
