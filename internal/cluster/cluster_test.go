package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/mongolock/mongolock/internal/cluster"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestAddSetsTimes(t *testing.T) {
	t.Parallel()
	clock := clockwork.NewFakeClockAt(t0)
	c := cluster.New(clock)
	e := c.Add(cluster.Event{Kind: cluster.EvKilled, Instance: "a"})
	if !e.T.Equal(t0) || !e.Received.Equal(t0) {
		t.Errorf("own event %+v", e)
	}
	e = c.Add(cluster.Event{Kind: cluster.EvRun, Instance: "a", T: at(-time.Second)})
	if !e.T.Equal(at(-time.Second)) || !e.Received.Equal(t0) {
		t.Errorf("reported event %+v", e)
	}
	if c.Mark() != 2 || len(c.Events()) != 2 || len(c.Since(1)) != 1 || len(c.Since(5)) != 0 {
		t.Errorf("mark %d, events %v", c.Mark(), c.Events())
	}
}

// TestAwait: Await returns the first n matches from its index on, as they
// come, and what it saw if its context ends first.
func TestAwait(t *testing.T) {
	t.Parallel()
	c := cluster.New(clockwork.NewRealClock())
	c.Add(cluster.Event{Kind: cluster.EvRun, Instance: "old"})
	from := c.Mark()
	go func() {
		for _, who := range []string{"a", "b", "c"} {
			c.Add(cluster.Event{Kind: cluster.EvLog, Instance: who})
			c.Add(cluster.Event{Kind: cluster.EvRun, Instance: who})
		}
	}()
	got, err := c.Await(context.Background(), from, 2, cluster.IsKind(cluster.EvRun))
	if err != nil || len(got) != 2 || got[0].Instance != "a" || got[1].Instance != "b" {
		t.Errorf("Await: %v, %v", got, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	got, err = c.Await(ctx, from, 4, cluster.IsKind(cluster.EvRun))
	if !errors.Is(err, context.DeadlineExceeded) || len(got) != 3 {
		t.Errorf("Await past the end: %v, %v", got, err)
	}
}

func TestEncoder(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	enc := cluster.NewEncoder(&b)
	in := cluster.Event{Kind: cluster.EvRun, Instance: "a", T: t0, Received: t0, Job: "tick", Firing: t0, Fence: 3, Waited: time.Second,
		Triggered: true, Runs: map[string]int{"tick": 1}}
	if err := enc.Encode(in); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("}\n")) || bytes.Count(b.Bytes(), []byte("\n")) != 1 || bytes.Contains(b.Bytes(), []byte("accepted")) {
		t.Errorf("line %q", b.String())
	}
	var out cluster.Event
	if err := json.Unmarshal(b.Bytes(), &out); err != nil {
		t.Fatal(err)
	}
	in.Received = time.Time{} // not sent
	if out.Kind != in.Kind || !out.T.Equal(in.T) || !out.Firing.Equal(in.Firing) || out.Waited != in.Waited || !out.Triggered ||
		out.Runs["tick"] != 1 || !out.Received.IsZero() {
		t.Errorf("decoded %+v, want %+v", out, in)
	}
}

// TestLeaderTerms: a term ends at the unlead of its fence, else at its
// instance's exit, else it is open.
func TestLeaderTerms(t *testing.T) {
	t.Parallel()
	evs := []cluster.Event{
		{Kind: cluster.EvLead, Instance: "a", Fence: 1, T: at(0)},
		{Kind: cluster.EvUnlead, Instance: "a", Fence: 9, T: at(1 * time.Second)}, // another term's
		{Kind: cluster.EvUnlead, Instance: "a", Fence: 1, T: at(2 * time.Second)},
		{Kind: cluster.EvLead, Instance: "b", Fence: 2, T: at(3 * time.Second)},
		{Kind: cluster.EvExited, Instance: "a", T: at(4 * time.Second)},
		{Kind: cluster.EvExited, Instance: "b", T: at(5 * time.Second)},
		{Kind: cluster.EvLead, Instance: "c", Fence: 3, T: at(6 * time.Second)},
	}
	got := cluster.LeaderTerms(evs, at(time.Minute))
	want := []cluster.Span{
		{Instance: "a", Fence: 1, Start: at(0), End: at(2 * time.Second)},
		{Instance: "b", Fence: 2, Start: at(3 * time.Second), End: at(5 * time.Second)},
		{Instance: "c", Fence: 3, Start: at(6 * time.Second), End: at(time.Minute), Open: true},
	}
	if !slices.Equal(got, want) {
		t.Errorf("terms\n%v\nwant\n%v", got, want)
	}
	if o := cluster.Overlaps(got); len(o) != 0 {
		t.Errorf("overlaps %v", o)
	}
	if g := cluster.Gaps(got); !slices.Equal(g, []time.Duration{time.Second, time.Second}) {
		t.Errorf("gaps %v", g)
	}
	// b leads before a's unlead.
	evs[3].T = at(1500 * time.Millisecond)
	if o := cluster.Overlaps(cluster.LeaderTerms(evs, at(time.Minute))); len(o) != 1 {
		t.Errorf("overlaps %v, want a's and b's", o)
	}
}

// TestWorkSpans: a term's work span ends at its last check before a write.
func TestWorkSpans(t *testing.T) {
	t.Parallel()
	evs := []cluster.Event{
		{Kind: cluster.EvLead, Instance: "a", Fence: 1, T: at(0)},
		{Kind: cluster.EvWork, Instance: "a", Fence: 1, Checked: at(time.Second)},
		{Kind: cluster.EvWork, Instance: "a", Fence: 1, Checked: at(500 * time.Millisecond)},
		{Kind: cluster.EvWork, Instance: "b", Fence: 1, Checked: at(time.Hour)}, // no term of b
	}
	got := cluster.WorkSpans(evs)
	if want := []cluster.Span{{Instance: "a", Fence: 1, Start: at(0), End: at(time.Second)}}; !slices.Equal(got, want) {
		t.Errorf("spans %v, want %v", got, want)
	}
}

func TestRuns(t *testing.T) {
	t.Parallel()
	local := at(time.Second).In(time.FixedZone("x", 3600))
	evs := []cluster.Event{
		{Kind: cluster.EvRun, Instance: "a", Job: "tick", Firing: at(2 * time.Second)},
		{Kind: cluster.EvRun, Instance: "a", Job: "tick", Firing: at(time.Second)},
		{Kind: cluster.EvRun, Instance: "b", Job: "tick", Firing: local}, // the same firing
		{Kind: cluster.EvRun, Instance: "a", Job: "even", Firing: at(2 * time.Second)},
		{Kind: cluster.EvLead, Instance: "a", Job: "tick", Firing: at(2 * time.Second)},
		{Kind: cluster.EvRun, Instance: "c", Job: "tick", Firing: at(time.Second), Triggered: true}, // not a firing
	}
	runs := cluster.Runs(evs)
	if who := runs[cluster.NewFiring("tick", at(time.Second))]; !slices.Equal(who, []string{"a", "b"}) || len(runs) != 3 {
		t.Errorf("runs %v", runs)
	}
	want := []cluster.Firing{
		cluster.NewFiring("tick", at(time.Second)), cluster.NewFiring("even", at(2*time.Second)), cluster.NewFiring("tick", at(2*time.Second)),
	}
	if got := cluster.SortedFirings(runs); !slices.Equal(got, want) {
		t.Errorf("sorted %v, want %v", got, want)
	}
}

func TestScheduled(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		from, to time.Duration
		every    time.Duration
		want     []time.Duration
	}{
		{0, 2 * time.Second, time.Second, []time.Duration{0, time.Second, 2 * time.Second}},
		{time.Millisecond, 2500 * time.Millisecond, time.Second, []time.Duration{time.Second, 2 * time.Second}},
		{time.Second, 5 * time.Second, 2 * time.Second, []time.Duration{2 * time.Second, 4 * time.Second}},
		{time.Second, 1500 * time.Millisecond, time.Second, []time.Duration{time.Second}},
		{1200 * time.Millisecond, 1500 * time.Millisecond, time.Second, nil},
	} {
		var want []time.Time
		for _, d := range tt.want {
			want = append(want, at(d))
		}
		if got := cluster.Scheduled(at(tt.from), at(tt.to), tt.every); !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("Scheduled(%v, %v, %v) = %v, want %v", tt.from, tt.to, tt.every, got, want)
		}
	}
}
