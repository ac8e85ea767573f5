package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/simdb"
	"github.com/mongolock/mongolock/internal/wirefault"
)

// TestClaimOncePerFiring checks the claim against the server: a firing is
// claimed once, an earlier one never after a later one, none while an
// earlier claim's work is pending, also when three clients race for every
// firing.
func TestClaimOncePerFiring(t *testing.T) { forBackends(t, testClaimOncePerFiring) }

func testClaimOncePerFiring(t *testing.T, be backend) {
	t.Parallel()
	db := be.newDB(t)
	stores := make([]*mongoStore, 3)
	cfg := defaultConfig()
	for i := range stores {
		stores[i] = newMongoStore(be.otherClient(t, db), cfg, clockwork.NewRealClock())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := testFiring
	works := map[string]*work{}
	claim := func(s *mongoStore, f time.Time, keeper string) bool {
		t.Helper()
		w, err := s.claim(ctx, "j", "@every 1s", f, keeper, false)
		if err != nil {
			t.Fatalf("claim %v by %s: %v", f, keeper, err)
		}
		if w != nil {
			works[keeper] = w
		}
		return w != nil
	}
	a, b := stores[0], stores[1]
	if !claim(a, base, "A") {
		t.Fatal("first claim of a new job lost")
	}
	if claim(b, base, "B") || claim(a, base, "A") {
		t.Fatal("a firing was claimed twice")
	}
	if claim(b, base.Add(-time.Second), "B") {
		t.Fatal("an earlier firing was claimed after a later one")
	}
	// Claims are settled in order: no later firing is claimable while
	// the claim of an earlier one is pending; its start settles it.
	start := func(s *mongoStore, f time.Time, keeper string, fence uint64) bool {
		t.Helper()
		_, ok, err := s.start(ctx, Run{Job: "j", Keeper: keeper, Scheduled: f, Fence: fence}, works[keeper], time.Time{})
		if err != nil {
			t.Fatalf("start %v by %s: %v", f, keeper, err)
		}
		return ok
	}
	if claim(b, base.Add(time.Second), "B") {
		t.Fatal("a later firing was claimed while an earlier claim was pending")
	}
	works["B"] = &work{job: "j", keeper: "B", last: base}
	if start(b, base, "B", 7) {
		t.Fatal("a firing started by a keeper that did not claim it")
	}
	if !start(a, base, "A", 7) || !start(a, base, "A", 7) {
		t.Fatal("the claimed firing could not start, or its retried start was refused")
	}
	if !claim(b, base.Add(time.Second), "B") {
		t.Fatal("the next firing was not claimable once the earlier one started")
	}
	// A claim taken over cannot be started by its first claimant.
	ws, err := a.takeOver(ctx, []string{"j"}, "B", "C")
	if err != nil || len(ws) != 1 || !ws[0].last.Equal(base.Add(time.Second)) {
		t.Fatalf("take over: %+v %v", ws, err)
	}
	if start(b, base.Add(time.Second), "B", 8) {
		t.Fatal("a claim taken over was started by its first claimant")
	}
	works["C"] = ws[0]
	if !start(a, base.Add(time.Second), "C", 9) {
		t.Fatal("the keeper that took the claim over could not start it")
	}

	// Three clients race for each of 30 firings of a fresh job.
	const firings = 30
	wins := make([][]string, firings)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keeper := string(rune('A' + i))
			for k := range firings {
				f := base.Add(time.Duration(k) * time.Second)
				w, err := s.claim(ctx, "race", "@every 1s", f, keeper, false)
				if err != nil {
					t.Error(err)
					return
				}
				if w == nil {
					continue
				}
				mu.Lock()
				wins[k] = append(wins[k], keeper)
				mu.Unlock()
				if _, ok, err := s.start(ctx, Run{Job: "race", Keeper: keeper, Scheduled: f, Fence: uint64(k + 1)}, w, time.Time{}); err != nil || !ok {
					t.Errorf("start of a firing won: %v %v", ok, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	won := 0
	for k, w := range wins {
		if len(w) > 1 {
			t.Errorf("firing %d claimed by %v, want at most one", k, w)
		}
		won += len(w)
	}
	// How many the race claimed depends on how the clients interleave (a
	// firing's claim fails while the one before is pending): none at all
	// would be a failure, and once every claim won is started, the next
	// firing is free to claim.
	if won == 0 {
		t.Errorf("none of %d firings claimed", firings)
	}
	if w, err := stores[0].claim(ctx, "race", "@every 1s", base.Add(firings*time.Second), "A", false); err != nil || w == nil {
		t.Errorf("the firing after the race, every claim won started: %v %v", w, err)
	}
	t.Logf("%d of %d firings claimed in the race", won, firings)
}

// TestStartIdempotent: a start record written twice (a retried write that
// had gone through) is accepted the second time; one for the same firing by
// another keeper or term is not.
func TestStartIdempotent(t *testing.T) { forBackends(t, testStartIdempotent) }

func testStartIdempotent(t *testing.T, b backend) {
	t.Parallel()
	s, ctx := newTestStore(t, b.newDB(t))
	f := testFiring
	w := mustClaim(t, ctx, s, "j", "@daily", f, "A")
	r := Run{Job: "j", Keeper: "A", Scheduled: f, Fence: 1<<32 | 7}
	for i := range 2 {
		if _, ok, err := s.start(ctx, r, w, time.Time{}); err != nil || !ok {
			t.Fatalf("start, attempt %d: %v %v", i+1, ok, err)
		}
	}
	for _, other := range []Run{
		{Job: "j", Keeper: "B", Scheduled: f, Fence: 1<<32 | 8},
		{Job: "j", Keeper: "A", Scheduled: f, Fence: 1<<32 | 9},
		{Job: "j", Keeper: "A", Scheduled: f.Add(-time.Hour), Fence: 1<<32 | 7},
	} {
		if _, ok, err := s.start(ctx, other, w, time.Time{}); err != nil || ok {
			t.Fatalf("start %+v over %+v: %v %v", other, r, ok, err)
		}
	}
	recs, _, err := LoadRecords(ctx, s.jobs, "j")
	if err != nil || len(recs) != 1 || recs[0].LastRun == nil || recs[0].LastRun.Keeper != "A" ||
		recs[0].LastRun.Fence != r.Fence || recs[0].LastRun.Outcome != OutcomeRunning {
		t.Fatalf("records %+v %v", recs, err)
	}
}

// TestRecordsRoundTrip writes a run and reads it back through the exported
// readers.
func TestRecordsRoundTrip(t *testing.T) { forBackends(t, testRecordsRoundTrip) }

func testRecordsRoundTrip(t *testing.T, b backend) {
	t.Parallel()
	db := b.newDB(t)
	s, ctx := newTestStore(t, db)
	f := testFiring
	w := mustClaim(t, ctx, s, "j", "@daily", f, "K")
	r := Run{Job: "j", Keeper: "K", Scheduled: f, Fence: 1<<32 | 5}
	start, ok, err := s.start(ctx, r, w, time.Time{})
	if err != nil || !ok || start.IsZero() {
		t.Fatalf("start: %v %v %v", start, ok, err)
	}
	recs, _, err := LoadRecords(ctx, s.jobs)
	if err != nil || len(recs) != 1 || recs[0].LastRun == nil || recs[0].LastRun.Outcome != OutcomeRunning {
		t.Fatalf("records while running: %+v %v", recs, err)
	}
	r.Start, r.Outcome, r.Error = start, OutcomeFailed, "boom"
	for range 2 { // idempotent
		if ok, err := s.finish(ctx, r, true); err != nil || !ok {
			t.Fatalf("finish: %v %v", ok, err)
		}
		if err := s.addHistory(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	recs, _, err = LoadRecords(ctx, s.jobs, "j", "absent")
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %+v %v", recs, err)
	}
	got := recs[0]
	lr := got.LastRun
	if got.Spec != "@daily" || got.ClaimedBy != "K" || !got.LastClaimed.Equal(f) || lr == nil ||
		lr.Keeper != "K" || !lr.Scheduled.Equal(f) || lr.Fence != r.Fence || lr.Outcome != OutcomeFailed ||
		lr.Error != "boom" || lr.End.Before(lr.Start) || lr.Start.IsZero() {
		t.Fatalf("record %+v, last run %+v", got, lr)
	}
	hist, _, err := LoadHistory(ctx, s.runs, "j", 10)
	if err != nil || len(hist) != 1 || hist[0].Keeper != "K" || !hist[0].Scheduled.Equal(f) || hist[0].Fence != r.Fence ||
		hist[0].Outcome != OutcomeFailed || hist[0].Error != "boom" || !hist[0].Start.Equal(start) || hist[0].End.Before(start) {
		t.Fatalf("history %+v %v", hist, err)
	}
}

// TestHistoryRecordReplaced: a firing's history record written again
// replaces the old one whole (a firing recorded as not run, then run after
// all, keeps no reason or error of before), while addHistoryOnce keeps a
// record that is there and writes one that is not.
func TestHistoryRecordReplaced(t *testing.T) { forBackends(t, testHistoryRecordReplaced) }

func testHistoryRecordReplaced(t *testing.T, b backend) {
	t.Parallel()
	db := b.newDB(t)
	s, ctx := newTestStore(t, db)
	f := testFiring
	skipped := Run{Job: "j", Keeper: "K", Scheduled: f, Outcome: OutcomeSkipped, Reason: "why"}
	if err := s.addHistory(ctx, skipped); err != nil {
		t.Fatal(err)
	}
	ran := Run{Job: "j", Keeper: "L", Scheduled: f, Start: f, Fence: 1<<32 | 5, Outcome: OutcomeSucceeded}
	if err := s.addHistory(ctx, ran); err != nil {
		t.Fatal(err)
	}
	spent := Run{Job: "j", Keeper: "K", Scheduled: f, Fence: 1<<32 | 4, Outcome: OutcomeFailed, Error: "not run: x"}
	if err := s.addHistoryOnce(ctx, spent); err != nil {
		t.Fatal(err)
	}
	var raw []bson.M
	cur, err := s.runs.Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	if err := cur.All(ctx, &raw); err != nil {
		t.Fatal(err)
	}
	if len(raw) != 1 {
		t.Fatalf("history %v, want one record", raw)
	}
	for _, k := range []string{fieldReason, fieldThrough, fieldCount, fieldError} {
		if _, ok := raw[0][k]; ok {
			t.Errorf("record %v keeps %q of the record it replaced", raw[0], k)
		}
	}
	if raw[0][fieldKeeper] != "L" || raw[0][fieldOutcome] != string(OutcomeSucceeded) {
		t.Fatalf("record %v, want L's run, kept", raw[0])
	}
	later := spent
	later.Scheduled = f.Add(time.Hour)
	if err := s.addHistoryOnce(ctx, later); err != nil {
		t.Fatal(err)
	}
	hist, _, err := LoadHistory(ctx, s.runs, "j", 10)
	if err != nil || len(hist) != 2 || !hist[0].Scheduled.Equal(later.Scheduled) || hist[0].Outcome != OutcomeFailed ||
		hist[0].Error != "not run: x" || hist[0].End.IsZero() {
		t.Fatalf("history %+v %v, want the later firing's record written", hist, err)
	}
}

// TestBatchedWrites: three stores claim the firings of 30 jobs at once,
// each job on its own goroutine as the scheduler does, so their claims go
// in shared commands. Each firing is claimed exactly once, the starts,
// ends and history written in batches are each job's own, a start in a
// batch is refused where a later firing already ran, and the commands are
// far fewer than the writes. Not parallel: its bursts of commands would
// slow the timing-sensitive cluster tests sharing the server, badly so
// under the race detector, which instruments the embedded FerretDB too.
func TestBatchedWrites(t *testing.T) {
	const jobs, firings = 30, 3
	const refused = jobs - 1
	db := mongotest.NewDatabase(t)
	cfg := defaultConfig()
	stores := make([]*mongoStore, 3)
	counters := make([]*mongotest.Counter, 3)
	for i := range stores {
		client, counter := mongotest.CountingClient(t)
		stores[i], counters[i] = newMongoStore(mongotest.Database(t, client, db.Name()), cfg, clockwork.NewRealClock()), counter
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	base := testFiring
	name := func(j int) string { return fmt.Sprintf("job-%02d", j) }
	keeper := func(i int) string { return string(rune('A' + i)) }

	// each runs f(i, j) for every store i and job j at once.
	each := func(f func(i, j int)) {
		var wg sync.WaitGroup
		for i := range stores {
			for j := range jobs {
				wg.Go(func() { f(i, j) })
			}
		}
		wg.Wait()
	}
	var mu sync.Mutex
	requests := 0
	for k := range firings {
		f := base.Add(time.Duration(k) * time.Second)
		winners := make([][]int, jobs)
		works := make([]*work, jobs)
		each(func(i, j int) {
			w, err := stores[i].claim(ctx, name(j), "@every 1s", f, keeper(i), false)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			requests++
			if w != nil {
				winners[j] = append(winners[j], i)
				works[j] = w
			}
		})
		for j, w := range winners {
			if len(w) != 1 {
				t.Fatalf("firing %d of %s claimed by %v, want exactly one", k, name(j), w)
			}
		}
		refuse := k == firings-1
		if refuse {
			// Keeper Z takes over the claim of the job
			// started last (so in a batch, not alone) and starts it before
			// its claimant does: the claimant's start must be refused.
			ws, err := stores[0].takeOver(ctx, []string{name(refused)}, keeper(winners[refused][0]), "Z")
			if err != nil || len(ws) != 1 {
				t.Fatalf("take over: %+v %v", ws, err)
			}
			if _, ok, err := stores[0].start(ctx, Run{Job: name(refused), Keeper: "Z", Scheduled: f, Fence: 99}, ws[0], time.Time{}); err != nil || !ok {
				t.Fatalf("start by the taker: %v %v", ok, err)
			}
		}
		// The winners start, end and record their runs, all at once.
		each(func(i, j int) {
			if len(winners[j]) != 1 || winners[j][0] != i {
				return
			}
			r := Run{Job: name(j), Keeper: keeper(i), Scheduled: f, Fence: uint64(1000*k + j)}
			start, ok, err := stores[i].start(ctx, r, works[j], time.Time{})
			mu.Lock()
			requests++
			mu.Unlock()
			wantOK := !refuse || j != refused
			if err != nil || ok != wantOK || ok == start.IsZero() {
				t.Errorf("start of %s firing %d: %v %v %v, want ok=%v", name(j), k, start, ok, err, wantOK)
				return
			}
			if !ok {
				return
			}
			r.Start, r.Outcome = start, OutcomeSucceeded
			if ok, err := stores[i].finish(ctx, r, true); err != nil || !ok {
				t.Errorf("finish of %s firing %d: %v %v", name(j), k, ok, err)
			}
			if err := stores[i].addHistory(ctx, r); err != nil {
				t.Error(err)
			}
			mu.Lock()
			requests += 2
			mu.Unlock()
		})
	}
	if t.Failed() {
		return
	}
	recs, _, err := LoadRecords(ctx, stores[0].jobs)
	if err != nil || len(recs) != jobs {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	last := base.Add((firings - 1) * time.Second)
	for j, rec := range recs[:refused] {
		lr := rec.LastRun
		if lr == nil || !lr.Scheduled.Equal(last) || lr.Keeper != rec.ClaimedBy || lr.Fence != uint64(1000*(firings-1)+j) ||
			lr.Outcome != OutcomeSucceeded || lr.End.IsZero() {
			t.Errorf("%s: record %+v, last run %+v", rec.Name, rec, lr)
		}
		hist, _, err := LoadHistory(ctx, stores[0].runs, rec.Name, 0)
		if err != nil || len(hist) != firings {
			t.Errorf("%s: %d runs in the history (%v), want %d", rec.Name, len(hist), err, firings)
		}
	}
	if lr := recs[refused].LastRun; lr == nil || lr.Keeper != "Z" || lr.Fence != 99 {
		t.Errorf("%s: the record of the later firing was overwritten: %+v", name(refused), lr)
	}
	commands := 0
	for _, c := range counters {
		commands += c.Total()
	}
	t.Logf("%d writes in %d commands", requests, commands)
	if commands > requests/2 {
		t.Errorf("%d writes took %d commands: not batched", requests, commands)
	}
}

// TestStartAndFinishBatchesPerRun calls the batched start and end writes
// directly with a batch in which one run must be refused, because its
// claim was taken over and started by another keeper: each run gets its own
// answer.
func TestStartAndFinishBatchesPerRun(t *testing.T) { forBackends(t, testStartAndFinishBatchesPerRun) }

func testStartAndFinishBatchesPerRun(t *testing.T, b backend) {
	t.Parallel()
	s, ctx := newTestStore(t, b.newDB(t))
	f := testFiring
	jobs := []string{"a", "b", "late", "c"}
	reqs := make([]startReq, len(jobs))
	for i, j := range jobs {
		w, err := s.claimOne(ctx, claimReq{j, "@every 1s"}, f, "A", false)
		if err != nil || w == nil {
			t.Fatalf("claim %s: %v %v", j, w, err)
		}
		reqs[i] = startReq{r: Run{Job: j, Keeper: "A", Scheduled: f, Fence: uint64(i + 1)}, w: w}
	}
	ws, err := s.takeOver(ctx, []string{"late"}, "A", "Z")
	if err != nil || len(ws) != 1 {
		t.Fatalf("take over: %+v %v", ws, err)
	}
	if res, err := s.startOne(ctx, startReq{r: Run{Job: "late", Keeper: "Z", Scheduled: f, Fence: 99}, w: ws[0]}); err != nil || !res.ok {
		t.Fatalf("start by the taker: %v %v", res, err)
	}
	started, err := s.startBatch(ctx, keyOf(f, "A"), reqs)
	if err != nil {
		t.Fatal(err)
	}
	fins := make([]finishReq, len(reqs))
	for i, q := range reqs {
		want := q.r.Job != "late"
		if started[i].ok != want || started[i].start.IsZero() == want {
			t.Errorf("start of %s: %+v, want ok=%v", q.r.Job, started[i], want)
		}
		q.r.Start, q.r.Outcome = started[i].start, OutcomeSucceeded
		fins[i] = finishReq{q.r, true}
	}
	ended, err := s.finishBatch(ctx, struct{}{}, fins)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range fins {
		if want := q.r.Job != "late"; ended[i] != want {
			t.Errorf("end of %s: %v, want %v", q.r.Job, ended[i], want)
		}
	}
	recs, _, err := LoadRecords(ctx, s.jobs, "late")
	if err != nil || len(recs) != 1 || recs[0].LastRun == nil || recs[0].LastRun.Keeper != "Z" ||
		recs[0].LastRun.Outcome != OutcomeRunning {
		t.Fatalf("the later run's record was touched: %+v %v", recs, err)
	}
}

// TestFirstClaimsTogether: the first claims of jobs that have no document
// yet go in one bulk write and one read after the batch's update and read,
// not one command each, and jobs claimed before in the same batch are
// judged as usual.
func TestFirstClaimsTogether(t *testing.T) {
	t.Parallel()
	const jobs = 40
	client, counter := mongotest.CountingClient(t)
	s, ctx := newTestStore(t, mongotest.Database(t, client, mongotest.NewDatabase(t).Name()))
	f := testFiring
	// job-00 was claimed for f by another keeper, job-01 for an earlier
	// firing; the others were never claimed.
	mustClaim(t, ctx, s, "job-00", "@every 1s", f, "other")
	if ok, err := s.settle(ctx, mustClaim(t, ctx, s, "job-01", "@every 1s", f.Add(-time.Second), "other")); err != nil || !ok {
		t.Fatalf("settle: %v %v", ok, err)
	}
	reqs := make([]claimReq, jobs)
	for j := range reqs {
		reqs[j] = claimReq{fmt.Sprintf("job-%02d", j), "@every 1s"}
	}
	counter.Reset()
	res, err := s.claimBatch(ctx, keyOf(f, "me"), reqs)
	if err != nil {
		t.Fatal(err)
	}
	for j, r := range res {
		if r.err != nil || (r.w != nil) != (j != 0) {
			t.Errorf("%s: won=%v err=%v, want won=%v", reqs[j].job, r.w != nil, r.err, j != 0)
		}
	}
	// update and find, then a bulk update and a find for the new ones.
	if got := counter.Total(); got != 4 {
		t.Errorf("%d commands, want 4: the first claims were not batched", got)
	}
	recs, _, err := LoadRecords(ctx, s.jobs)
	if err != nil || len(recs) != jobs {
		t.Fatalf("records: %d, %v", len(recs), err)
	}
	for _, rec := range recs {
		wantBy := "me"
		if rec.Name == "job-00" {
			wantBy = "other"
		}
		if !rec.LastClaimed.Equal(f) || rec.ClaimedBy != wantBy || rec.Spec != "@every 1s" {
			t.Errorf("%s: %+v, want claimed for %v by %s", rec.Name, rec, f, wantBy)
		}
	}
}

// TestFirstClaimsResend: a first claim that finds the document made by
// another instance meanwhile is lost, and the claims after it in the same
// bulk write are made all the same, on FerretDB by a second pass.
func TestFirstClaimsResend(t *testing.T) { forBackends(t, testFirstClaimsResend) }

func testFirstClaimsResend(t *testing.T, b backend) {
	t.Parallel()
	s, ctx := newTestStore(t, b.newDB(t))
	f := testFiring
	mustClaim(t, ctx, s, "job-0", "@every 1s", f, "other")
	reqs := []claimReq{{"job-0", "@every 1s"}, {"job-1", "@every 1s"}, {"job-2", "@every 1s"}, {"job-3", "@every 1s"}}
	out := make([]claimResult, len(reqs))
	s.firstClaims(ctx, reqs, []int{0, 1, 2, 3}, f, "me", bson.NewObjectID(), out)
	for i, r := range out {
		if r.err != nil || (r.w != nil) != (i != 0) {
			t.Errorf("%s: won=%v err=%v, want won=%v", reqs[i].job, r.w != nil, r.err, i != 0)
		}
	}
}

// testFiring is a firing time for store tests, after any real one.
var testFiring = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// newTestStore returns a store on db and a context for the test's calls.
func newTestStore(t *testing.T, db *mongo.Database) (*mongoStore, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return newMongoStore(db, defaultConfig(), clockwork.NewRealClock()), ctx
}

// mustClaim claims firing f of job for keeper and fails the test unless
// the claim is won.
func mustClaim(t *testing.T, ctx context.Context, s *mongoStore, job, spec string, f time.Time, keeper string) *work {
	t.Helper()
	w, err := s.claim(ctx, job, spec, f, keeper, false)
	if err != nil || w == nil {
		t.Fatalf("claim of %s at %v by %s: won=%v err=%v", job, f, keeper, w != nil, err)
	}
	return w
}

// TestRetriedStartSparesNewerClaim: a start write sent again after it went
// through (the driver retries it on a network error, and FerretDB does not
// recognise the retry) once its firing was settled and a later firing
// claimed by another keeper finds its own record and reports the start,
// without settling the newer claim again; nor does undoing that start
// touch the newer claim. Alone and in a batch.
func TestRetriedStartSparesNewerClaim(t *testing.T) { forBackends(t, testRetriedStartSparesNewerClaim) }

func testRetriedStartSparesNewerClaim(t *testing.T, b backend) {
	t.Parallel()
	s, ctx := newTestStore(t, b.newDB(t))
	f, next := testFiring, testFiring.Add(24*time.Hour)
	jobs := []string{"alone", "batch-1", "batch-2"}
	reqs := map[string]startReq{}
	newer := map[string]*work{}
	for i, job := range jobs {
		w := mustClaim(t, ctx, s, job, "@daily", f, "A")
		r := Run{Job: job, Keeper: "A", Scheduled: f, Fence: uint64(i + 1)}
		if _, ok, err := s.start(ctx, r, w, time.Time{}); err != nil || !ok {
			t.Fatalf("start of %s: %v %v", job, ok, err)
		}
		newer[job] = mustClaim(t, ctx, s, job, "@daily", next, "B")
		reqs[job] = startReq{r: r, w: w}
	}
	first, _, _ := LoadRecords(ctx, s.jobs, "alone")

	// The retries.
	one, err := s.startOne(ctx, reqs["alone"])
	if err != nil || !one.ok || !one.start.Equal(first[0].LastRun.Start) {
		t.Errorf("retried start: %+v %v, want the first write's start %v", one, err, first[0].LastRun.Start)
	}
	res, err := s.startBatch(ctx, keyOf(f, "A"), []startReq{reqs["batch-1"], reqs["batch-2"]})
	if err != nil || len(res) != 2 || !res[0].ok || !res[1].ok {
		t.Errorf("retried batch of starts: %+v %v, want both reported started", res, err)
	}

	recs, _, err := LoadRecords(ctx, s.jobs, jobs...)
	if err != nil || len(recs) != len(jobs) {
		t.Fatalf("records %+v %v", recs, err)
	}
	for _, rec := range recs {
		if !rec.Pending || rec.ClaimedBy != "B" || !rec.LastClaimed.Equal(next) {
			t.Errorf("%s: pending=%v claimed by %s for %v; want B's claim of %v still pending", rec.Name,
				rec.Pending, rec.ClaimedBy, rec.LastClaimed, next)
		}
	}
	if _, ok, err := s.start(ctx, Run{Job: "alone", Keeper: "B", Scheduled: next, Fence: 9}, newer["alone"], time.Time{}); err != nil || !ok {
		t.Errorf("start of the newer claim: %v %v", ok, err)
	}
}

// TestUndoneStartSparesNewerClaimOfSameKeeper: undoing the start of a
// triggered run, after the same keeper claimed a later firing (a second
// firing in progress, OverlapWait), leaves that claim as it is: a claim
// of a firing, not the triggered run again.
func TestUndoneStartSparesNewerClaimOfSameKeeper(t *testing.T) {
	forBackends(t, testUndoneStartSparesNewerClaimOfSameKeeper)
}

func testUndoneStartSparesNewerClaimOfSameKeeper(t *testing.T, b backend) {
	t.Parallel()
	s, ctx := newTestStore(t, b.newDB(t))
	f, next := testFiring, testFiring.Add(24*time.Hour)
	w := mustClaim(t, ctx, s, "j", "@daily", f, "A")
	if ok, err := s.settle(ctx, w); err != nil || !ok {
		t.Fatalf("settle: %v %v", ok, err)
	}
	if made, err := TriggerJob(ctx, s.jobs, "j"); err != nil || !made {
		t.Fatalf("trigger: %v %v", made, err)
	}
	docs, err := s.jobDocs(ctx, []string{"j"})
	if err != nil {
		t.Fatal(err)
	}
	wt, err := s.claimTrigger(ctx, "j", docs["j"].Control.Trigger, "A")
	if err != nil || wt == nil {
		t.Fatalf("claim trigger: %v %v", wt, err)
	}
	rt := Run{Job: "j", Keeper: "A", Scheduled: wt.trig, Fence: 1, Triggered: true}
	if _, ok, err := s.start(ctx, rt, wt, time.Time{}); err != nil || !ok {
		t.Fatalf("start of the triggered run: %v %v", ok, err)
	}
	mustClaim(t, ctx, s, "j", "@daily", next, "A")
	docs, err = s.jobDocs(ctx, []string{"j"})
	if err != nil {
		t.Fatal(err)
	}
	if d := docs["j"]; !d.Pending || d.By != "A" || !d.Last.Equal(next) || !d.PTrig.IsZero() {
		t.Errorf("claim after the undo: pending=%v by %s last %v trigger %v; want A's claim of %v, no trigger",
			d.Pending, d.By, d.Last, d.PTrig, next)
	}
}

// backend is where a store test runs: the test server, or a simulated
// one.
type backend struct {
	// newDB returns an empty database.
	newDB func(t *testing.T) *mongo.Database
	// otherClient returns db through a client of its own.
	otherClient func(t *testing.T, db *mongo.Database) *mongo.Database
}

// forBackends runs test on the test server (mongotest) and on the
// simulated server of the simulation (internal/simdb), as MongoDB and as
// FerretDB 1.24: the store's conformance suite, which ties the simulation
// to what the store does on a real server.
func forBackends(t *testing.T, test func(t *testing.T, b backend)) {
	t.Helper()
	t.Run("server", func(t *testing.T) {
		test(t, backend{
			newDB: func(t *testing.T) *mongo.Database { return mongotest.NewDatabase(t) },
			otherClient: func(t *testing.T, db *mongo.Database) *mongo.Database {
				return mongotest.Database(t, mongotest.NewClient(t), db.Name())
			},
		})
	})
	for _, flavor := range []simdb.Flavor{simdb.MongoDB, simdb.FerretDB1} {
		t.Run("simulated "+flavor.String(), func(t *testing.T) {
			srv := simdb.NewServer(flavor, 0)
			connect := func(t *testing.T, name string) *mongo.Database {
				client, err := srv.NewLink(t.Name(), nil).Connect(nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
				return client.Database(name)
			}
			test(t, backend{
				newDB:       func(t *testing.T) *mongo.Database { return connect(t, "app") },
				otherClient: func(t *testing.T, db *mongo.Database) *mongo.Database { return connect(t, db.Name()) },
			})
		})
	}
}

// TestFailedClaimBatchRetried: a batched claim whose update fails (FerretDB
// 2.x breaks a deadlock between two instances' batches by failing one; a
// connection breaks) does not cost every firing of the batch: the jobs the
// read after it finds still claimable are claimed again, in smaller
// batches, and those another instance claimed meanwhile are lost as usual.
// On the test server through FerretDB 2.x's deadlock answer, and on the
// simulated server through dropped commands.
func TestFailedClaimBatchRetried(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	fail := 0 // multi-document claim updates to fail
	failNext := func(cmd bson.D) bool {
		mu.Lock()
		defer mu.Unlock()
		if len(cmd) > 0 && cmd[0].Key == "update" && fail > 0 {
			fail--
			return true
		}
		return false
	}
	t.Run("server, deadlocks", func(t *testing.T) {
		t.Parallel()
		client := mongotest.NewRewrittenClient(t, []wirefault.Rule{wirefault.Deadlock("update", failNext)})
		testFailedClaimBatchRetried(t, mongotest.Database(t, client, mongotest.NewDatabase(t).Name()), &mu, &fail)
	})
	t.Run("simulated, dropped", func(t *testing.T) {
		t.Parallel()
		var mu2 sync.Mutex
		fail2 := 0
		plan := func(cmd bson.D) simdb.Fate {
			mu2.Lock()
			defer mu2.Unlock()
			if len(cmd) > 0 && cmd[0].Key == "update" && fail2 > 0 {
				fail2--
				return simdb.Fate{Drop: true}
			}
			return simdb.Fate{}
		}
		client, err := simdb.NewServer(simdb.MongoDB, 0).NewLink(t.Name(), plan).Connect(options.Client().SetRetryWrites(false))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
		testFailedClaimBatchRetried(t, client.Database("app"), &mu2, &fail2)
	})
}

// testFailedClaimBatchRetried claims a batch of jobs, with *fail (guarded
// by mu) of the updates the client sends failing.
func testFailedClaimBatchRetried(t *testing.T, db *mongo.Database, mu *sync.Mutex, fail *int) {
	const jobs = 10
	s, ctx := newTestStore(t, db)
	f := testFiring
	reqs := make([]claimReq, jobs)
	for j := range reqs {
		reqs[j] = claimReq{fmt.Sprintf("job-%02d", j), "@every 1s"}
		// Claimed and settled once: the batch claims by an update.
		if ok, err := s.settle(ctx, mustClaim(t, ctx, s, reqs[j].job, "@every 1s", f.Add(-time.Second), "me")); err != nil || !ok {
			t.Fatalf("settle: %v %v", ok, err)
		}
	}
	for _, fails := range []int{1, 2} { // the batch's update; and the first half's retry too
		f := f.Add(time.Duration(fails-1) * time.Hour)
		// job-00's firing is lost to another instance.
		if ok, err := s.settle(ctx, mustClaim(t, ctx, s, "job-00", "@every 1s", f, "other")); err != nil || !ok {
			t.Fatalf("settle: %v %v", ok, err)
		}
		mu.Lock()
		*fail = fails
		mu.Unlock()
		res, err := s.claimBatch(ctx, keyOf(f, "me"), reqs)
		if err != nil {
			t.Fatal(err)
		}
		for j, r := range res {
			if r.err != nil || (r.w != nil) != (j != 0) {
				t.Errorf("%d failed: %s: won=%v err=%v, want won=%v", fails, reqs[j].job, r.w != nil, r.err, j != 0)
			}
			if r.w != nil {
				if ok, err := s.settle(ctx, r.w); err != nil || !ok {
					t.Fatalf("settle: %v %v", ok, err)
				}
			}
		}
	}
}

// TestResumeOfRunningJobKeepsResumeTime: a resume of a job that is not
// paused changes nothing of when its last pause ended: moving that time
// would make the firings since the pause's end fall "while paused" (seed
// 3917: a firing recorded as paused long after the resume).
func TestResumeOfRunningJobKeepsResumeTime(t *testing.T) {
	forBackends(t, testResumeOfRunningJobKeepsResumeTime)
}

func testResumeOfRunningJobKeepsResumeTime(t *testing.T, b backend) {
	t.Parallel()
	db := b.newDB(t)
	s, ctx := newTestStore(t, db)
	mustClaim(t, ctx, s, "j", "@daily", testFiring, "K")
	if err := s.pauseJob(ctx, "j", Pause{Note: "n"}); err != nil {
		t.Fatal(err)
	}
	if err := s.resumeJob(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	read := func() jobDoc {
		t.Helper()
		var d jobDoc
		if err := s.jobs.FindOne(ctx, bson.D{{Key: fieldID, Value: "j"}}).Decode(&d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	if read().Control.ResumedAt.IsZero() {
		t.Fatal("a resume of a paused job recorded no resume time")
	}
	// The first resume an hour ago, so that a second one moving it
	// cannot go unseen, whatever the server's clock resolution.
	first := read().Control.PausedAt.Add(-time.Hour)
	if _, err := s.jobs.UpdateOne(ctx, bson.D{{Key: fieldID, Value: "j"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldResumedAt, Value: first}}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.resumeJob(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	if again := read().Control; !again.ResumedAt.Equal(first) {
		t.Fatalf("resumed at %v, then %v by a second resume: want it kept", first, again.ResumedAt)
	}
	if err := s.resumeJob(ctx, "absent"); !errors.Is(err, ErrUnknownJob) {
		t.Fatalf("resume of an unknown job: %v, want ErrUnknownJob", err)
	}
}
