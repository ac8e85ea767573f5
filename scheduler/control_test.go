package scheduler

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
)

// controlJobs returns the jobs collection of a fresh database holding the
// document of job "j", as a Scheduler's Start makes it, and a context for
// the test's calls.
func controlJobs(t *testing.T) (*mongo.Collection, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	coll := mongotest.NewDatabase(t).Collection(DefaultJobsCollection)
	addJobDoc(t, ctx, coll, "j")
	return coll, ctx
}

func addJobDoc(t *testing.T, ctx context.Context, coll *mongo.Collection, name string) {
	t.Helper()
	_, err := coll.InsertOne(ctx, bson.D{{Key: fieldID, Value: name}, {Key: fieldSpec, Value: "@every 1s"}, {Key: fieldLast, Value: time.Unix(0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
}

func record(t *testing.T, ctx context.Context, coll *mongo.Collection, name string) Record {
	t.Helper()
	recs, _, err := LoadRecords(ctx, coll, name)
	if err != nil || len(recs) != 1 {
		t.Fatalf("records of %q: %v, %v", name, recs, err)
	}
	return recs[0]
}

// rawDoc is the job document as stored, to check that nothing changed.
func rawDoc(t *testing.T, ctx context.Context, coll *mongo.Collection, name string) bson.M {
	t.Helper()
	var d bson.M
	if err := coll.FindOne(ctx, bson.D{{Key: fieldID, Value: name}}).Decode(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestControlJob(t *testing.T) {
	t.Parallel()
	coll, ctx := controlJobs(t)
	now, err := mongoutil.ServerTime(ctx, coll.Database())
	if err != nil {
		t.Fatal(err)
	}

	until := now.Add(time.Hour).Truncate(time.Millisecond)
	if err := PauseJob(ctx, coll, "j", Pause{Note: "deploy freeze", Until: until, At: time.Unix(1, 0)}); err != nil {
		t.Fatal(err)
	}
	r := record(t, ctx, coll, "j")
	if p := r.Paused; p == nil || p.Note != "deploy freeze" || !p.Until.Equal(until) || p.At.Before(now.Add(-time.Minute)) {
		t.Fatalf("after PauseJob: %+v", p)
	}
	// Pausing again replaces the note and the end.
	if err := PauseJob(ctx, coll, "j", Pause{}); err != nil {
		t.Fatal(err)
	}
	if p := record(t, ctx, coll, "j").Paused; p == nil || p.Note != "" || !p.Until.IsZero() || p.At.IsZero() {
		t.Fatalf("after a second PauseJob: %+v", p)
	}

	// A paused job can be triggered; a waiting trigger is not made twice.
	for i, want := range []bool{true, false} {
		made, err := TriggerJob(ctx, coll, "j")
		if err != nil || made != want {
			t.Fatalf("trigger %d: %v, %v; want %v", i, made, err, want)
		}
	}
	if r := record(t, ctx, coll, "j"); r.Triggered.IsZero() {
		t.Fatalf("no trigger recorded: %+v", r)
	}

	// Removed: the trigger is dropped, and none can be made.
	if err := RemoveJob(ctx, coll, "j"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveJob(ctx, coll, "j"); err != nil {
		t.Fatalf("second RemoveJob: %v", err)
	}
	if r := record(t, ctx, coll, "j"); !r.Removed || !r.Triggered.IsZero() {
		t.Fatalf("after RemoveJob: %+v", r)
	}
	made, err := TriggerJob(ctx, coll, "j")
	if !errors.Is(err, ErrJobRemoved) || made || !strings.Contains(err.Error(), `"j"`) {
		t.Fatalf("trigger of a removed job: %v, %v", made, err)
	}

	// Resume brings it back, and resets the failures in a row.
	if _, err := coll.UpdateOne(ctx, bson.D{{Key: fieldID, Value: "j"}}, bson.D{{Key: "$set", Value: bson.D{{Key: fieldFails, Value: 3}}}}); err != nil {
		t.Fatal(err)
	}
	if err := ResumeJob(ctx, coll, "j"); err != nil {
		t.Fatal(err)
	}
	r = record(t, ctx, coll, "j")
	if r.Paused != nil || r.Removed || r.FailedInARow != 0 || !r.Triggered.IsZero() {
		t.Fatalf("after ResumeJob: %+v", r)
	}
	d := rawDoc(t, ctx, coll, "j")
	for _, f := range []string{fieldPaused, fieldPauseNote, fieldRemoved} {
		if _, ok := d[f]; ok {
			t.Errorf("field %s left after ResumeJob: %v", f, d)
		}
	}
	// What the job was, and from when to when, stays: the claim after
	// the resume records the firings of that time as not run.
	var doc jobDoc
	if err := coll.FindOne(ctx, bson.D{{Key: fieldID, Value: "j"}}).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Control
	if c.Suspended != ReasonRemoved || c.PausedAt.IsZero() || !c.ResumedAt.After(c.PausedAt) ||
		c.suspendedAt(c.PausedAt, c.ResumedAt) != ReasonRemoved || c.suspendedAt(c.ResumedAt, c.ResumedAt) != "" {
		t.Errorf("after ResumeJob: control %+v", c)
	}
	if made, err := TriggerJob(ctx, coll, "j"); err != nil || !made {
		t.Fatalf("trigger after ResumeJob: %v, %v", made, err)
	}
}

// TestConcurrentTriggers: operators triggering a job at once, each with
// its own client, make one request.
func TestConcurrentTriggers(t *testing.T) {
	t.Parallel()
	coll, ctx := controlJobs(t)
	const clients = 5
	colls := make([]*mongo.Collection, clients)
	for i := range colls {
		colls[i] = mongotest.Database(t, mongotest.NewClient(t), coll.Database().Name()).Collection(coll.Name())
	}
	for round := range 10 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		made := 0
		start := make(chan struct{})
		for _, c := range colls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := TriggerJob(ctx, c, "j")
				if err != nil {
					t.Errorf("round %d: %v", round, err)
				}
				if ok {
					mu.Lock()
					made++
					mu.Unlock()
				}
			}()
		}
		close(start)
		wg.Wait()
		if made != 1 {
			t.Fatalf("round %d: %d of %d concurrent triggers made a request, want 1", round, made, clients)
		}
		// An instance claims it.
		if _, err := coll.UpdateOne(ctx, bson.D{{Key: fieldID, Value: "j"}}, bson.D{{Key: "$unset", Value: bson.D{{Key: fieldTrigger, Value: ""}}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestControlBadInput: refused input writes nothing.
func TestControlBadInput(t *testing.T) {
	t.Parallel()
	coll, ctx := controlJobs(t)
	now, err := mongoutil.ServerTime(ctx, coll.Database())
	if err != nil {
		t.Fatal(err)
	}
	before := rawDoc(t, ctx, coll, "j")
	tests := []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"pause: empty name", func() error { return PauseJob(ctx, coll, "", Pause{}) }, ErrInvalidJob, "name is empty"},
		{"resume: empty name", func() error { return ResumeJob(ctx, coll, "") }, ErrInvalidJob, "name is empty"},
		{"trigger: empty name", func() error { _, err := TriggerJob(ctx, coll, ""); return err }, ErrInvalidJob, "name is empty"},
		{"remove: empty name", func() error { return RemoveJob(ctx, coll, "") }, ErrInvalidJob, "name is empty"},
		{"note too long", func() error { return PauseJob(ctx, coll, "j", Pause{Note: strings.Repeat("x", MaxPauseNote+1)}) },
			ErrInvalidOption, "note of 1025 bytes"},
		{"note not UTF-8", func() error { return PauseJob(ctx, coll, "j", Pause{Note: "\xff"}) }, ErrInvalidOption, "UTF-8"},
		{"until past", func() error { return PauseJob(ctx, coll, "j", Pause{Until: now.Add(-time.Hour)}) },
			ErrInvalidOption, "not after the server's time"},
		{"until a year ago", func() error { return PauseJob(ctx, coll, "j", Pause{Until: now.AddDate(-1, 0, 0), Note: "n"}) },
			ErrInvalidOption, `pause "j" until`},
	}
	for _, tt := range tests {
		err := tt.call()
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("%s: %v, want %v containing %q", tt.name, err, tt.want, tt.text)
		}
	}
	if after := rawDoc(t, ctx, coll, "j"); len(after) != len(before) {
		t.Errorf("refused input changed the document: %v, was %v", after, before)
	}
	if n, err := coll.CountDocuments(ctx, bson.D{}); err != nil || n != 1 {
		t.Errorf("%d documents after refused input, %v", n, err)
	}
	// The note's limit is inclusive.
	if err := PauseJob(ctx, coll, "j", Pause{Note: strings.Repeat("é", MaxPauseNote/2)}); err != nil {
		t.Errorf("note of %d bytes: %v", MaxPauseNote, err)
	}
}

// TestControlUnknownJob: a name with no document is ErrUnknownJob, naming
// the job and the collection, and makes none.
func TestControlUnknownJob(t *testing.T) {
	t.Parallel()
	coll, ctx := controlJobs(t)
	calls := map[string]func() error{
		"pause":   func() error { return PauseJob(ctx, coll, "nope", Pause{Note: "n"}) },
		"resume":  func() error { return ResumeJob(ctx, coll, "nope") },
		"trigger": func() error { _, err := TriggerJob(ctx, coll, "nope"); return err },
		"remove":  func() error { return RemoveJob(ctx, coll, "nope") },
	}
	for op, call := range calls {
		err := call()
		if !errors.Is(err, ErrUnknownJob) {
			t.Errorf("%s: %v, want ErrUnknownJob", op, err)
			continue
		}
		for _, w := range []string{op + ` "nope"`, mongoutil.Namespace(coll)} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", op, err, w)
			}
		}
	}
	if n, err := coll.CountDocuments(ctx, bson.D{{Key: fieldID, Value: "nope"}}); err != nil || n != 0 {
		t.Errorf("%d documents of an unknown job, %v", n, err)
	}
}

// controlEvents keeps the control events of a Session.
type controlEvents struct {
	mu     sync.Mutex
	events []lock.Event
}

func (c *controlEvents) Observe(e lock.Event) {
	switch e.Kind {
	case lock.JobPaused, lock.JobResumed, lock.JobTriggered, lock.JobRemoved:
		c.mu.Lock()
		c.events = append(c.events, e)
		c.mu.Unlock()
	}
}

func (c *controlEvents) take() []lock.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.events
	c.events = nil
	return out
}

func TestSchedulerControl(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := mongotest.NewDatabase(t)
	l, err := lock.New(db)
	if err != nil {
		t.Fatal(err)
	}
	obs := &controlEvents{}
	session, err := lock.NewSession(l, lock.WithKeeperID("k"), lock.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	s, err := New(db, session)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddJob("j", "@every 1h", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	coll := db.Collection(DefaultJobsCollection)
	addJobDoc(t, ctx, coll, "j")
	addJobDoc(t, ctx, coll, "elsewhere") // another program's job

	want := func(kind lock.EventKind, reason string) {
		t.Helper()
		got := obs.take()
		if len(got) != 1 || got[0].Kind != kind || got[0].Job != "j" || got[0].LockID != s.LockID("j") ||
			got[0].Reason != reason || got[0].KeeperID != "k" {
			t.Fatalf("events %+v, want one %v of j with reason %q", got, kind, reason)
		}
		select { // the loop was woken
		case <-s.wake:
		default:
			t.Fatalf("%v did not wake the loop", kind)
		}
	}
	if err := s.Pause(ctx, "j", Pause{Note: "why"}); err != nil {
		t.Fatal(err)
	}
	want(lock.JobPaused, "why")
	if r := record(t, ctx, coll, "j"); r.Paused == nil || r.Paused.Note != "why" {
		t.Fatalf("Pause not recorded: %+v", r)
	}
	if made, err := s.Trigger(ctx, "j"); err != nil || !made {
		t.Fatalf("Trigger: %v, %v", made, err)
	}
	want(lock.JobTriggered, "")
	if made, err := s.Trigger(ctx, "j"); err != nil || made {
		t.Fatalf("second Trigger: %v, %v", made, err)
	}
	if got := obs.take(); len(got) != 0 {
		t.Fatalf("a trigger that made no request reported %+v", got)
	}
	if err := s.Remove(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	want(lock.JobRemoved, "")
	if err := s.Resume(ctx, "j"); err != nil {
		t.Fatal(err)
	}
	want(lock.JobResumed, "")

	// Only jobs registered here, and their documents must exist.
	for _, name := range []string{"elsewhere", "nope"} {
		if err := s.Pause(ctx, name, Pause{}); !errors.Is(err, ErrUnknownJob) || !strings.Contains(err.Error(), "not registered") {
			t.Errorf("Pause of %q: %v", name, err)
		}
	}
	if err := s.AddJob("new", "@every 1h", func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trigger(ctx, "new"); !errors.Is(err, ErrUnknownJob) || !strings.Contains(err.Error(), "no document") {
		t.Errorf("Trigger of a job without a document: %v", err)
	}
	if err := s.Remove(ctx, ""); !errors.Is(err, ErrInvalidJob) {
		t.Errorf("Remove of an empty name: %v", err)
	}
	if got := obs.take(); len(got) != 0 {
		t.Errorf("failed calls reported %+v", got)
	}
	if r := record(t, ctx, coll, "elsewhere"); r.Paused != nil {
		t.Errorf("a job not registered here was paused: %+v", r)
	}

}

// TestRecordPauseEnded: a pause whose end has passed, by the server's
// clock, is over: its record says the job is not paused, as its firings
// from the end on run. One whose end is ahead still says paused.
func TestRecordPauseEnded(t *testing.T) {
	t.Parallel()
	coll, ctx := controlJobs(t)
	addJobDoc(t, ctx, coll, "ahead")
	now, err := mongoutil.ServerTime(ctx, coll.Database())
	if err != nil {
		t.Fatal(err)
	}
	// As PauseJob wrote them an hour ago; now it would refuse ends
	// already past.
	for name, till := range map[string]time.Time{"j": now.Add(-time.Minute), "ahead": now.Add(time.Hour)} {
		_, err := coll.UpdateOne(ctx, bson.D{{Key: fieldID, Value: name}}, bson.D{{Key: "$set", Value: bson.D{
			{Key: fieldPaused, Value: true}, {Key: fieldSuspended, Value: ReasonPaused},
			{Key: fieldPauseTill, Value: till}, {Key: fieldPausedAt, Value: now.Add(-time.Hour)},
		}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := record(t, ctx, coll, "j").Paused; p != nil {
		t.Errorf("pause ended a minute ago: record says paused %+v", p)
	}
	if p := record(t, ctx, coll, "ahead").Paused; p == nil || p.Until.IsZero() {
		t.Errorf("pause ending in an hour: record says %+v, want paused", p)
	}
}
