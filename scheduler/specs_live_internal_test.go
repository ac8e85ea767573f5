package scheduler

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/lock"
)

// TestStaleInstanceGivesSpecBack (issue #27 §4): three instances run job y
// every 3s; an instance of the old version (every 2s) starts and takes the
// spec (the newest registration wins), then stops. The job must not stop
// with it: the three instances still up register every 3s, and take the
// job back within a poll or two of its stop (a poll is a second here), so
// that the cluster follows a spec a live instance registers. Before, the
// job fired nothing from the old instance's stop on.
func TestStaleInstanceGivesSpecBack(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		c := newSpecCluster(t)
		for _, name := range []string{"new1", "new2", "new3"} {
			c.start(name, "@every 3s")
		}
		c.at(6500 * time.Millisecond)
		c.start("old", "@every 2s") // from 6.5s: 8, 10, 12
		c.at(12500 * time.Millisecond)
		c.stop("old")
		c.at(29 * time.Second)
		synctest.Wait()
		// 15s: the poll after the stop (12.5s) took the job back.
		if got, want := c.ran(), secs(3, 6, 8, 10, 12, 15, 18, 21, 24, 27); !slices.Equal(got, want) {
			t.Errorf("firings run %v, want %v: the job stopped with the stale instance", got, want)
		}
		for _, name := range []string{"new1", "new2", "new3"} {
			c.start(name, "@every 3s")
		}
		c.at(6500 * time.Millisecond)
		c.start("old", "@every 2s") // from 6.5s: 8, 10, 12
		c.at(12500 * time.Millisecond)
		c.stop("old")
		c.at(29 * time.Second)
		synctest.Wait()
		got := c.ran()
		t.Logf("runs %v", got)
		for _, want := range secs(3, 6, 8, 10, 12, 18, 21, 24, 27) {
			if !slices.Contains(got, want) {
				t.Errorf("firings run %v, want %v among them: the job stopped with the stale instance", got, want)
				break
			}
		}
		for _, f := range got {
			if f > 12*time.Second && f%(3*time.Second) != 0 {
				t.Errorf("firing %v of the stale instance's spec after it stopped (runs %v)", f, got)
			}
		}
		if n := len(slices.Compact(slices.Clone(got))); n != len(got) {
			t.Errorf("firings run %v: one ran twice", got)
		}
		for _, name := range []string{"new1", "new2", "new3"} {
			if got, want := c.kinds(name), []lock.EventKind{lock.JobSpecSuperseded, lock.JobSpecRestored}; !slices.Equal(got, want) {
				t.Errorf("%s reported %v, want %v", name, got, want)
			}
		}
	})
}

// TestLiveSpecsDoNotFlap: two instances up with different specs (a
// misconfigured one, or a rolling deploy that stalled) each find the other
// live: the newest registration's spec stays the job's, and neither takes
// it back, however many polls pass. A third instance with the older spec,
// started later, is the newest registration: it wins, and keeps it.
func TestLiveSpecsDoNotFlap(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		c := newSpecCluster(t)
		c.start("a", "@every 2s")
		c.at(5500 * time.Millisecond)
		c.start("b", "@every 3s") // from 5.5s: 6, 9, ... 30
		c.at(30500 * time.Millisecond)
		c.start("a2", "@every 2s") // from 30.5s: 32, 34, ... 58
		c.at(59 * time.Second)
		synctest.Wait()
		var want []time.Duration
		want = append(want, secs(2, 4)...)
		for s := 6; s <= 30; s += 3 {
			want = append(want, time.Duration(s)*time.Second)
		}
		for s := 32; s <= 58; s += 2 {
			want = append(want, time.Duration(s)*time.Second)
		}
		if got := c.ran(); !slices.Equal(got, want) {
			t.Errorf("firings run %v, want %v", got, want)
		}
		for name, want := range map[string][]lock.EventKind{
			"a":  {lock.JobSpecSuperseded, lock.JobSpecRestored},
			"b":  {lock.JobSpecSuperseded},
			"a2": nil,
		} {
			if got := c.kinds(name); !slices.Equal(got, want) {
				t.Errorf("%s reported %v, want %v", name, got, want)
			}
		}
	})
}

// TestNewestLiveRegistrationWins: during a rolling deploy the last
// instance to register the new spec stops while an older new-spec
// instance and an old-spec one are up. The old one takes the job (the
// spec's last registrant is gone), and the newer instance takes it back
// (its registration is the newer): the newest live registration wins, and
// then nothing changes any more.
func TestNewestLiveRegistrationWins(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	synctest.Test(t, func(t *testing.T) {
		c := newSpecCluster(t)
		c.start("old", "@every 2s")
		c.at(5500 * time.Millisecond)
		c.start("new1", "@every 3s")
		c.at(8500 * time.Millisecond)
		c.start("new2", "@every 3s")
		c.at(12500 * time.Millisecond)
		c.stop("new2")
		c.at(40 * time.Second)
		synctest.Wait()
		// Every 3s from new1's registration on: old held the job for less
		// than a poll, between two firings.
		want := secs(2, 4)
		for s := 6; s <= 39; s += 3 {
			want = append(want, time.Duration(s)*time.Second)
		}
		if got := c.ran(); !slices.Equal(got, want) {
			t.Errorf("firings run %v, want %v", got, want)
		}
		if k := c.kinds("new1"); len(k) > 2 {
			t.Errorf("new1 reported %v: the spec flapped", k)
		}
		// Superseded by new1, took the job back at new2's stop, superseded
		// by new1 again: and no more.
		if got, want := c.kinds("old"), []lock.EventKind{lock.JobSpecSuperseded, lock.JobSpecRestored, lock.JobSpecSuperseded}; !slices.Equal(got, want) {
			t.Errorf("old reported %v, want %v", got, want)
		}
	})
}

// TestTakesBack: a superseded instance registers its spec again when no
// live instance is known to register the spec followed, or when its own
// registration is the newer; never else, so that two live instances with
// different specs agree poll after poll.
func TestTakesBack(t *testing.T) {
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }
	mine := regDoc{Spec: "@every 2s", By: "a", Claimant: "a/1", Since: at(10)}
	older := regDoc{Spec: "@every 3s", By: "b", Claimant: "b/1", Since: at(5)}
	newer := regDoc{Spec: "@every 3s", By: "b", Claimant: "b/1", Since: at(20)}
	for _, tc := range []struct {
		name   string
		active regDoc
		known  bool
		live   bool
		want   bool
	}{
		{"newer registrant live", newer, true, true, false},
		{"newer registrant gone", newer, true, false, true},
		{"older registrant live", older, true, true, true},
		{"no registrant recorded", regDoc{}, false, true, true},
		{"registrant of an earlier version (no claimant)", regDoc{Spec: "@every 3s", By: "b"}, true, true, true},
		{"same time, claimant after mine", regDoc{Spec: "@every 3s", By: "b", Claimant: "b/1", Since: at(10)}, true, true, false},
		{"same time, claimant before mine", regDoc{Spec: "@every 3s", By: "0", Claimant: "0/1", Since: at(10)}, true, true, true},
	} {
		if got := takesBack(mine, tc.active, tc.known, tc.live); got != tc.want {
			t.Errorf("%s: takesBack = %v, want %v", tc.name, got, tc.want)
		}
		// The other side of two live instances: never both take it.
		if tc.known && tc.live && tc.active.Claimant != "" && takesBack(mine, tc.active, true, true) && takesBack(tc.active, mine, true, true) {
			t.Errorf("%s: both instances take the job back: it would flap", tc.name)
		}
	}
}

// TestOrphaned: a job is orphaned when no instance up is known to register
// it: neither the last registrant of a spec nor the last claimant.
func TestOrphaned(t *testing.T) {
	up := func(keepers ...string) func(string) bool {
		return func(k string) bool { return slices.Contains(keepers, k) }
	}
	r := Record{Name: "j", Spec: "@every 2s", ClaimedBy: "k/1/ab12cd34",
		Specs: []RegisteredSpec{{Spec: "@every 2s", By: "a"}, {Spec: "@every 3s", By: "b"}}}
	for _, tc := range []struct {
		name string
		r    Record
		up   func(string) bool
		want bool
	}{
		{"registrant of the spec followed up", r, up("a"), false},
		{"registrant of another spec up: it takes the job back", r, up("b"), false},
		{"last claimant up (a keeper id with a slash)", r, up("k/1"), false},
		{"nobody up", r, up("z"), true},
		{"removed", Record{Removed: true, Specs: r.Specs}, up(), false},
		{"no spec recorded", Record{Name: "j", Spec: "@every 2s"}, up(), false},
	} {
		if got := tc.r.Orphaned(tc.up); got != tc.want {
			t.Errorf("%s: Orphaned = %v, want %v", tc.name, got, tc.want)
		}
	}
}
