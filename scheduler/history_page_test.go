package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
)

// seedHistory records n firings of job a second apart from base, with a
// second attempt for every fifth and a missed record for every seventh.
func seedHistory(t *testing.T, runs *mongo.Collection, job string, base time.Time, n int) []Run {
	t.Helper()
	st := &mongoStore{runs: runs, keepHistory: true}
	var all []Run
	for i := range n {
		f := base.Add(time.Duration(i) * time.Second)
		r := Run{Job: job, Keeper: "k", Scheduled: f, Start: f, Outcome: OutcomeSucceeded, Attempt: 1, Fence: uint64(i + 1)}
		switch {
		case i%7 == 0:
			r = Run{Job: job, Scheduled: f, Through: f, Count: 1, Outcome: OutcomeSkipped, Reason: ReasonMisfired, Attempt: 1}
		case i%5 == 0:
			r.Outcome, r.Error = OutcomeFailed, "boom"
			all = append(all, r)
			r.Attempt, r.Outcome, r.Error = 2, OutcomeSucceeded, ""
		}
		all = append(all, r)
	}
	reqs := make([]histReq, len(all))
	for i, r := range all {
		reqs[i] = histReq{r: r}
	}
	if _, err := st.historyBatch(context.Background(), struct{}{}, reqs); err != nil {
		t.Fatal(err)
	}
	return all
}

func TestLoadHistoryPage(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	runs := db.Collection(DefaultRunsCollection)
	ctx := context.Background()
	base := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	all := seedHistory(t, runs, "j", base, 40)
	seedHistory(t, runs, "other", base, 3)

	// Walking older pages of 7 and then newer ones back visits every
	// record once, in order, ties of one firing's attempts included.
	var seen []Run
	var cur *HistoryCursor
	pages := 0
	for {
		p, err := LoadHistoryPage(ctx, runs, HistoryQuery{Job: "j", Limit: 7, Cursor: cur})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		seen = append(seen, p.Runs...)
		if pages > 1 && p.Newer == nil {
			t.Fatalf("page %d has no newer cursor", pages)
		}
		if p.Older == nil {
			break
		}
		cur = p.Older
	}
	if len(seen) != len(all) {
		t.Fatalf("saw %d records in %d pages, want %d", len(seen), pages, len(all))
	}
	for i := 1; i < len(seen); i++ {
		a, b := seen[i-1], seen[i]
		if a.Scheduled.Before(b.Scheduled) || (a.Scheduled.Equal(b.Scheduled) && a.Attempt <= b.Attempt) {
			t.Fatalf("records %d and %d out of order: %v#%d then %v#%d", i-1, i, a.Scheduled, a.Attempt, b.Scheduled, b.Attempt)
		}
	}
	// From the oldest page, newer pages lead back to the newest.
	oldest, err := LoadHistoryPage(ctx, runs, HistoryQuery{Job: "j", Limit: 7, Cursor: cur})
	if err != nil {
		t.Fatal(err)
	}
	back := len(oldest.Runs)
	for c := oldest.Newer; c != nil; {
		p, err := LoadHistoryPage(ctx, runs, HistoryQuery{Job: "j", Limit: 7, Cursor: c})
		if err != nil {
			t.Fatal(err)
		}
		back += len(p.Runs)
		c = p.Newer
		if c == nil && !p.Runs[0].Scheduled.Equal(seen[0].Scheduled) {
			t.Fatalf("the last newer page starts at %v, want the newest %v", p.Runs[0].Scheduled, seen[0].Scheduled)
		}
	}
	if back < len(all) {
		t.Fatalf("walking back saw %d records, want at least %d", back, len(all))
	}

	// Filters.
	count := func(q HistoryQuery) int {
		t.Helper()
		q.Job, q.Limit = "j", MaxHistoryPage
		p, err := LoadHistoryPage(ctx, runs, q)
		if err != nil {
			t.Fatal(err)
		}
		return len(p.Runs)
	}
	if n := count(HistoryQuery{Outcomes: []Outcome{OutcomeFailed}}); n != 6 {
		t.Errorf("failed: %d records, want 6", n)
	}
	if n := count(HistoryQuery{ReasonPrefix: "misf"}); n != 6 {
		t.Errorf("misfired: %d records, want 6", n)
	}
	if n := count(HistoryQuery{Retries: true}); n != 6 {
		t.Errorf("retries: %d records, want 6", n)
	}
	if n := count(HistoryQuery{From: base.Add(10 * time.Second), To: base.Add(20 * time.Second)}); n != 12 {
		t.Errorf("from 10 s to 20 s: %d records, want 12 (10 firings, two with a retry)", n)
	}
	// A cursor past the oldest record gives an empty page.
	p, err := LoadHistoryPage(ctx, runs, HistoryQuery{Job: "j", Limit: 5, Cursor: &HistoryCursor{At: base.Add(-time.Hour)}})
	if err != nil || len(p.Runs) != 0 || p.Older != nil {
		t.Errorf("page past the oldest: %d records, older %v, err %v", len(p.Runs), p.Older, err)
	}
}

func TestLoadHistoryPageBadInput(t *testing.T) {
	t.Parallel()
	coll := mongotest.NewDatabase(t).Collection(DefaultRunsCollection)
	now := time.Now()
	for _, q := range []HistoryQuery{
		{Limit: 5},
		{Job: "j"},
		{Job: "j", Limit: MaxHistoryPage + 1},
		{Job: "j", Limit: 5, Outcomes: []Outcome{"exploded"}},
		{Job: "j", Limit: 5, From: now, To: now.Add(-time.Second)},
	} {
		if _, err := LoadHistoryPage(context.Background(), coll, q); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%+v: err %v, want ErrInvalidOption", q, err)
		}
	}
	for _, s := range []string{"", "x1.0", "o", "o12", "o12.-1", "oab.1", "o1.99999999", "n" + fmt.Sprint(uint64(1)<<63) + ".0"} {
		if _, err := ParseHistoryCursor(s); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("cursor %q: err %v, want ErrInvalidOption", s, err)
		}
	}
	c := HistoryCursor{At: time.Unix(1700000000, 5).UTC(), Skip: 3, Newer: true}
	if got, err := ParseHistoryCursor(c.String()); err != nil || got != c {
		t.Errorf("round trip of %v: %v, %v", c, got, err)
	}
}

func TestLoadRecordsPage(t *testing.T) {
	t.Parallel()
	db := mongotest.NewDatabase(t)
	jobs := db.Collection(DefaultJobsCollection)
	ctx := context.Background()
	st := &mongoStore{jobs: jobs}
	var reqs []regReq
	for i := range 25 {
		reqs = append(reqs, regReq{claimReq: claimReq{fmt.Sprintf("job-%02d", i), "@every 1m"}})
	}
	reqs = append(reqs, regReq{claimReq: claimReq{"x.y", "@every 1m"}}, regReq{claimReq: claimReq{"xay", "@every 1m"}})
	if err := st.register(ctx, reqs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := PauseJob(ctx, jobs, "job-03", Pause{Note: "n", By: "alice"}); err != nil {
		t.Fatal(err)
	}
	var names []string
	after := ""
	for {
		p, err := LoadRecordsPage(ctx, jobs, RecordsQuery{Prefix: "job-", After: after, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range p.Records {
			names = append(names, r.Name)
			if r.Name == "job-03" && (r.Paused == nil || r.Paused.By != "alice") {
				t.Errorf("job-03: paused %+v, want by alice", r.Paused)
			}
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(names) != 25 || names[0] != "job-00" || names[24] != "job-24" {
		t.Fatalf("pages gave %v", names)
	}
	p, err := LoadRecordsPage(ctx, jobs, RecordsQuery{Prefix: "x.", Limit: 10})
	if err != nil || len(p.Records) != 1 || p.Records[0].Name != "x.y" {
		t.Fatalf("prefix x.: %+v, %v (the dot is not a pattern)", p.Records, err)
	}
	p, err = LoadRecordsPage(ctx, jobs, RecordsQuery{Attention: true, Limit: 10})
	if err != nil || len(p.Records) != 1 || p.Records[0].Name != "job-03" {
		t.Fatalf("attention: %+v, %v", p.Records, err)
	}
	if err := ResumeJob(ctx, jobs, "job-03"); err != nil {
		t.Fatal(err)
	}
	recs, _, err := LoadRecords(ctx, jobs, "job-03")
	if err != nil || recs[0].Paused != nil {
		t.Fatalf("after resume: %+v, %v", recs, err)
	}
	if _, err := LoadRecordsPage(ctx, jobs, RecordsQuery{Limit: 0}); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("limit 0: %v", err)
	}
}

// TestRegisteredSpecs: each instance's registration records its spec and
// keeper in the job's document, one entry a spec, and the newest
// registration's spec is the job's, since it was made.
func TestRegisteredSpecs(t *testing.T) {
	t.Parallel()
	jobs := mongotest.NewDatabase(t).Collection(DefaultJobsCollection)
	ctx := context.Background()
	for _, r := range []struct{ keeper, spec string }{{"a", "@every 1m"}, {"b", "@every 1m"}, {"c", "*/5 * * * *"}} {
		st := &mongoStore{jobs: jobs}
		reg := regReq{claimReq: claimReq{"j", r.spec}, reg: regDoc{Spec: r.spec, By: r.keeper, Claimant: r.keeper + "/x", Since: time.Now()}}
		if err := st.register(ctx, []regReq{reg}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, err := LoadRecords(ctx, jobs, "j")
	if err != nil {
		t.Fatal(err)
	}
	want := []RegisteredSpec{{Spec: "*/5 * * * *", By: "c"}, {Spec: "@every 1m", By: "b"}}
	if len(recs) != 1 || !slices.Equal(recs[0].Specs, want) || recs[0].Spec != "*/5 * * * *" || recs[0].SpecSince.IsZero() {
		t.Fatalf("record %+v, want specs %v and the newest registration's spec, with its time", recs, want)
	}
}
