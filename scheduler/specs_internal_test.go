package scheduler

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/lock"
)

// specCluster is instances of one job on one simulated server, each with
// the spec it registers, and what they ran and reported.
type specCluster struct {
	t      *testing.T
	srv    *simdb.Server
	base   time.Time
	mu     sync.Mutex
	runs   []time.Duration         // the firings run, by their time since base
	events map[string][]lock.Event // by instance: JobSpecSuperseded, JobSpecRestored
	ins    map[string]*simInstance
}

func newSpecCluster(t *testing.T) *specCluster {
	return &specCluster{t: t, srv: simdb.NewServer(simdb.MongoDB, 0), base: time.Now(),
		events: map[string][]lock.Event{}, ins: map[string]*simInstance{}}
}

// start starts instance name, registering job "y" with spec.
func (c *specCluster) start(name, spec string) {
	c.t.Helper()
	in := newSimInstance(c.t, c.srv, name, 0, 3*time.Second, nil)
	c.ins[name] = in
	if err := in.session.AddObserver(lock.ObserverFunc(func(e lock.Event) {
		if e.Kind == lock.JobSpecSuperseded || e.Kind == lock.JobSpecRestored {
			c.mu.Lock()
			c.events[name] = append(c.events[name], e)
			c.mu.Unlock()
		}
	})); err != nil {
		c.t.Fatal(err)
	}
	err := in.s.AddJob("y", spec, func(ctx context.Context) error {
		r, _ := RunFromContext(ctx)
		c.mu.Lock()
		c.runs = append(c.runs, r.Scheduled.Sub(c.base))
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		c.t.Fatal(err)
	}
	if err := in.s.Start(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *specCluster) stop(name string) {
	c.t.Helper()
	if err := c.ins[name].s.Stop(context.Background()); err != nil {
		c.t.Fatal(err)
	}
}

// at sleeps until d after base.
func (c *specCluster) at(d time.Duration) { time.Sleep(time.Until(c.base.Add(d))) }

func (c *specCluster) ran() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := slices.Clone(c.runs)
	slices.Sort(out)
	return out
}

func (c *specCluster) kinds(name string) []lock.EventKind {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []lock.EventKind
	for _, e := range c.events[name] {
		out = append(out, e.Kind)
	}
	return out
}

func secs(ss ...int) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = time.Duration(s) * time.Second
	}
	return out
}

// TestNewestSpecWins: two instances register job y with different specs;
// the job's firings follow one spec at any time, the newest registration's,
// from the moment it is made: no firing of the superseded spec after the
// switch, none of the new one before it (b's 9s, though instances were
// up), none twice, and none of the followed spec missed. The instance
// superseded reports it, and again when its spec is the cluster's again.
func TestNewestSpecWins(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		c := newSpecCluster(t)
		c.start("a", "@every 2s")
		c.at(9500 * time.Millisecond)
		c.start("b", "@every 3s") // from 9.5s: 12, 15, 18
		c.at(20500 * time.Millisecond)
		c.start("a2", "@every 2s") // from 20.5s: 22, 24, 26, 28
		c.at(29 * time.Second)
		synctest.Wait()
		if got, want := c.ran(), secs(2, 4, 6, 8, 12, 15, 18, 22, 24, 26, 28); !slices.Equal(got, want) {
			t.Errorf("firings run %v, want %v", got, want)
		}
		if got, want := c.kinds("a"), []lock.EventKind{lock.JobSpecSuperseded, lock.JobSpecRestored}; !slices.Equal(got, want) {
			t.Errorf("a reported %v, want %v", got, want)
		}
		if got, want := c.kinds("b"), []lock.EventKind{lock.JobSpecSuperseded}; !slices.Equal(got, want) {
			t.Errorf("b reported %v, want %v", got, want)
		}
		c.mu.Lock()
		e := c.events["b"][0]
		c.mu.Unlock()
		if !strings.Contains(e.Reason, `"@every 2s"`) || !strings.Contains(e.Reason, `"@every 3s"`) || e.Job != "y" {
			t.Errorf("b's event %+v, want both specs named", e)
		}
		infos, err := c.ins["b"].s.Jobs(context.Background())
		if err != nil || len(infos) != 1 || !infos[0].Superseded || infos[0].Spec != "@every 2s" || infos[0].Registered != "@every 3s" ||
			infos[0].SpecSince.IsZero() {
			t.Errorf("b's jobs %+v %v, want y superseded by @every 2s", infos, err)
		}
	})
}

// TestRollingDeployChangesSpec: a rolling deploy replaces two instances
// running job y every 2s with two running it every 3s, one at a time. From
// the first new instance's start on, the firings are the new spec's, each
// run once, none missed, while old and new instances overlap.
func TestRollingDeployChangesSpec(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		c := newSpecCluster(t)
		c.start("old1", "@every 2s")
		c.start("old2", "@every 2s")
		c.at(9500 * time.Millisecond)
		c.start("new1", "@every 3s")
		c.at(11 * time.Second)
		c.stop("old1")
		c.at(13500 * time.Millisecond)
		c.start("new2", "@every 3s")
		c.at(16500 * time.Millisecond)
		c.stop("old2")
		c.at(29 * time.Second)
		synctest.Wait()
		if got, want := c.ran(), secs(2, 4, 6, 8, 12, 15, 18, 21, 24, 27); !slices.Equal(got, want) {
			t.Errorf("firings run %v, want %v", got, want)
		}
		for _, name := range []string{"old1", "old2"} {
			if got := c.kinds(name); !slices.Equal(got, []lock.EventKind{lock.JobSpecSuperseded}) {
				t.Errorf("%s reported %v, want superseded", name, got)
			}
		}
		for _, name := range []string{"new1", "new2"} {
			if got := c.kinds(name); len(got) != 0 {
				t.Errorf("%s reported %v, want nothing", name, got)
			}
		}
	})
}

// TestRegisteredSpecIn: a spec is compared with the time zone it is read
// in, unless it names its own or does not depend on one.
func TestRegisteredSpecIn(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip(err)
	}
	for _, tc := range []struct {
		spec string
		loc  *time.Location
		want string
	}{
		{"0 3 * * *", time.UTC, "0 3 * * *"},
		{"0 3 * * *", nil, "0 3 * * *"},
		{"0 3 * * *", paris, "CRON_TZ=Europe/Paris 0 3 * * *"},
		{"CRON_TZ=Asia/Tokyo 0 3 * * *", paris, "CRON_TZ=Asia/Tokyo 0 3 * * *"},
		{"TZ=Asia/Tokyo 0 3 * * *", paris, "TZ=Asia/Tokyo 0 3 * * *"},
		{"@every 10s", paris, "@every 10s"},
		{"@daily", paris, "CRON_TZ=Europe/Paris @daily"},
	} {
		if got := RegisteredSpecIn(tc.spec, tc.loc); got != tc.want {
			t.Errorf("RegisteredSpecIn(%q, %v) = %q, want %q", tc.spec, tc.loc, got, tc.want)
		}
	}
	if specHash("a", "@every 1s") == specHash("b", "@every 1s") {
		t.Error("two jobs with one spec have one hash: a batch's {sh: {$in: ...}} would match another job's")
	}
}
