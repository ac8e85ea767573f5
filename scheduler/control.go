package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
)

// MaxPauseNote is the longest note a pause may carry, in bytes: it is shown
// in every listing of the job, so it is a note, not a log.
const MaxPauseNote = 1024

// MaxPauseBy is the longest name a pause's By may carry, in bytes.
const MaxPauseBy = 256

// PauseJob pauses job name in jobs (the jobs collection,
// DefaultJobsCollection unless WithJobsCollection), cluster-wide: no
// instance starts a firing of it from the next one on until ResumeJob, or
// until p.Until if it is set; a run in progress is not stopped. Firings
// not run are recorded as skipped (ReasonPaused); a TriggerJob still runs
// it once. Pausing again replaces the note, the end and who paused it
// (p.By). p.At is ignored (LoadRecords reports it: the server's time of the
// pause).
//
// p.Until must be after the server's time, which PauseJob reads first
// (hello's localTime), p.Note at most MaxPauseNote bytes of UTF-8 and p.By
// at most MaxPauseBy;
// otherwise PauseJob writes nothing and returns an error wrapping
// ErrInvalidOption. A job without a document (no Scheduler registering it
// ever started) is ErrUnknownJob, a nil ctx or jobs an error wrapping
// lock.ErrInvalidArgument (as for the Scheduler's methods). It needs no
// Scheduler, for tools such as the CLI; the write has write concern
// majority, whatever jobs's.
func PauseJob(ctx context.Context, jobs *mongo.Collection, name string, p Pause) error {
	if err := checkCall("pause", ctx, jobs); err != nil {
		return err
	}
	if err := checkPause(name, p); err != nil {
		return err
	}
	return pauseIn(ctx, controlColl(jobs), name, p)
}

// checkPause checks the arguments of PauseJob, but for p.Until, which
// only the store's clock can judge.
func checkPause(name string, p Pause) error {
	if err := checkControl("pause", name); err != nil {
		return err
	}
	switch {
	case len(p.Note) > MaxPauseNote:
		return fmt.Errorf("%w: pause %q: note of %d bytes, longer than %d", ErrInvalidOption, name, len(p.Note), MaxPauseNote)
	case !utf8.ValidString(p.Note):
		return fmt.Errorf("%w: pause %q: note is not valid UTF-8", ErrInvalidOption, name)
	case len(p.By) > MaxPauseBy || !utf8.ValidString(p.By):
		return fmt.Errorf("%w: pause %q: by must be valid UTF-8 of at most %d bytes", ErrInvalidOption, name, MaxPauseBy)
	}
	return nil
}

// pauseIn is PauseJob of checked arguments, on coll (controlColl).
func pauseIn(ctx context.Context, coll *mongo.Collection, name string, p Pause) error {
	if !p.Until.IsZero() {
		// hello, not the write's own $currentDate: a bad Until must leave
		// nothing written, and an update cannot compare with the time it
		// stamps on FerretDB ($$NOW). Behind mongos this is mongos's clock;
		// it only has to rule out ends already past.
		now, err := mongoutil.ServerTime(ctx, coll.Database())
		if err != nil {
			return wrapErr(ctx, "read the server's time to pause", name, err)
		}
		if err := checkUntil(name, p, now); err != nil {
			return err
		}
	}
	set := bson.D{{Key: fieldPaused, Value: true}, {Key: fieldSuspended, Value: ReasonPaused}}
	var unset bson.D
	if p.Note != "" {
		set = append(set, bson.E{Key: fieldPauseNote, Value: p.Note})
	} else {
		unset = append(unset, bson.E{Key: fieldPauseNote, Value: ""})
	}
	if !p.Until.IsZero() {
		set = append(set, bson.E{Key: fieldPauseTill, Value: p.Until})
	} else {
		unset = append(unset, bson.E{Key: fieldPauseTill, Value: ""})
	}
	if p.By != "" {
		set = append(set, bson.E{Key: fieldPausedBy, Value: p.By})
	} else {
		unset = append(unset, bson.E{Key: fieldPausedBy, Value: ""})
	}
	update := bson.D{
		{Key: "$set", Value: set},
		{Key: "$currentDate", Value: bson.D{{Key: fieldPausedAt, Value: true}}},
	}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	return updateJob(ctx, coll, "pause", name, update)
}

// ResumeJob undoes PauseJob and RemoveJob of job name in jobs,
// cluster-wide: the job runs again from its next firing on, with its count
// of failed firings in a row reset (a job paused by JobPauseAfter starts
// afresh). Firings skipped meanwhile are not run again. Resuming a
// job that is neither paused nor removed only resets that count. Errors
// are those of PauseJob.
func ResumeJob(ctx context.Context, jobs *mongo.Collection, name string) error {
	if err := checkCall("resume", ctx, jobs); err != nil {
		return err
	}
	if err := checkControl("resume", name); err != nil {
		return err
	}
	return resumeIn(ctx, controlColl(jobs), name)
}

// resumeIn is ResumeJob of a checked name, on coll (controlColl).
func resumeIn(ctx context.Context, coll *mongo.Collection, name string) error {
	// Only a pause or removal is ended: the resume's time, moved by a
	// resume of a job that is not paused, would make the firings since
	// the last pause's end fall "while paused" (seed 3917). The failures
	// in a row are reset either way.
	suspended := bson.D{{Key: fieldID, Value: name}, {Key: "$or", Value: bson.A{
		bson.D{{Key: fieldPaused, Value: true}}, bson.D{{Key: fieldRemoved, Value: true}}}}}
	res, err := coll.UpdateOne(ctx, suspended, bson.D{
		{Key: "$unset", Value: bson.D{
			{Key: fieldPaused, Value: ""},
			{Key: fieldPauseNote, Value: ""},
			{Key: fieldPausedBy, Value: ""},
			{Key: fieldRemoved, Value: ""},
		}},
		// The pause's start and end stay: with the resume's time it tells the
		// claim after it which firings fell while the job was paused.
		{Key: "$currentDate", Value: bson.D{{Key: fieldResumedAt, Value: true}}},
		{Key: "$set", Value: bson.D{{Key: fieldFails, Value: 0}}},
	})
	switch {
	case err != nil:
		return wrapErr(ctx, "resume", name, err)
	case res.MatchedCount == 1:
		return nil
	}
	return updateJob(ctx, coll, "resume", name, bson.D{{Key: "$set", Value: bson.D{{Key: fieldFails, Value: 0}}}})
}

// TriggerJob asks for one run of job name now, outside its schedule, from
// any instance: the first instance to see the request claims it, and runs
// it through the same claim, lock and fence as a firing, after the
// previous run if one still goes. It runs even while the job is paused (an
// explicit request), not once it is removed (ErrJobRemoved). TriggerJob
// reports whether it made the request: false if one was already waiting,
// which then stands for both, so two operators triggering at once cause
// one run. A request survives restarts until an instance claims it.
// Errors are those of PauseJob; if a write error leaves the outcome
// unknown, TriggerJob returns the error, and the request may have been
// made.
func TriggerJob(ctx context.Context, jobs *mongo.Collection, name string) (bool, error) {
	if err := checkCall("trigger", ctx, jobs); err != nil {
		return false, err
	}
	if err := checkControl("trigger", name); err != nil {
		return false, err
	}
	return triggerIn(ctx, controlColl(jobs), name)
}

// triggerIn is TriggerJob of a checked name, on coll (controlColl).
func triggerIn(ctx context.Context, coll *mongo.Collection, name string) (bool, error) {
	filter := bson.D{
		{Key: fieldID, Value: name},
		{Key: fieldTrigger, Value: bson.D{{Key: "$exists", Value: false}}},
		{Key: fieldRemoved, Value: bson.D{{Key: "$ne", Value: true}}},
	}
	res, err := coll.UpdateOne(ctx, filter, bson.D{{Key: "$currentDate", Value: bson.D{{Key: fieldTrigger, Value: true}}}})
	if err != nil {
		return false, wrapErr(ctx, "trigger", name, err)
	}
	if res.MatchedCount == 1 {
		return true, nil
	}
	// Not matched: no such job, removed, or a request was waiting (and may
	// have been claimed since: it still covers this one).
	var d struct {
		Removed bool `bson:"removed"`
	}
	err = coll.FindOne(ctx, bson.D{{Key: fieldID, Value: name}},
		options.FindOne().SetProjection(bson.D{{Key: fieldRemoved, Value: 1}})).Decode(&d)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, unknownJob(coll, "trigger", name)
	case err != nil:
		return false, wrapErr(ctx, "trigger", name, err)
	case d.Removed:
		return false, removedJob(name)
	}
	return false, nil
}

// RemoveJob removes job name in jobs, cluster-wide: no instance runs it any
// more, whatever it registers, and a waiting TriggerJob is dropped. The
// document stays, as a tombstone that keeps instances still registering
// the job from running it, and keeps its last claim and run; ResumeJob
// brings the job back. Removing a removed job does nothing. Errors are
// those of PauseJob.
func RemoveJob(ctx context.Context, jobs *mongo.Collection, name string) error {
	if err := checkCall("remove", ctx, jobs); err != nil {
		return err
	}
	if err := checkControl("remove", name); err != nil {
		return err
	}
	return removeIn(ctx, controlColl(jobs), name)
}

// removeIn is RemoveJob of a checked name, on coll (controlColl).
func removeIn(ctx context.Context, coll *mongo.Collection, name string) error {
	return updateJob(ctx, coll, "remove", name, bson.D{
		{Key: "$set", Value: bson.D{{Key: fieldRemoved, Value: true}, {Key: fieldSuspended, Value: ReasonRemoved}}},
		{Key: "$unset", Value: bson.D{{Key: fieldTrigger, Value: ""}}},
		{Key: "$currentDate", Value: bson.D{{Key: fieldPausedAt, Value: true}}},
	})
}

// checkColl is checkCall for a call on one collection, named what ("jobs",
// "runs"): the readers and the maintenance calls check them first.
func checkColl(op string, ctx context.Context, coll *mongo.Collection, what string) error {
	if ctx == nil {
		return fmt.Errorf("%s: %w: nil context", op, lock.ErrInvalidArgument)
	}
	if coll == nil {
		return fmt.Errorf("%s: %w: nil %s collection", op, lock.ErrInvalidArgument, what)
	}
	return nil
}

// checkCall returns an error wrapping lock.ErrInvalidArgument, naming op,
// if ctx is nil or one of jobs is: the control calls and Stop check them
// first, so that a nil argument is an error that changes nothing, never a
// panic.
func checkCall(op string, ctx context.Context, jobs ...*mongo.Collection) error {
	if ctx == nil {
		return fmt.Errorf("%s: %w: nil context", op, lock.ErrInvalidArgument)
	}
	for _, c := range jobs {
		if c == nil {
			return fmt.Errorf("%s: %w: nil jobs collection", op, lock.ErrInvalidArgument)
		}
	}
	return nil
}

// checkControl checks the name given to a control function.
func checkControl(op, name string) error {
	if name == "" {
		return fmt.Errorf("%w: %s: name is empty", ErrInvalidJob, op)
	}
	return nil
}

// controlColl is jobs with the store's write concern and read preference
// (newMongoStore): a control write must survive a failover as a claim
// does, and the read after a trigger decides what TriggerJob reports.
func controlColl(jobs *mongo.Collection) *mongo.Collection {
	return jobs.Clone(options.Collection().SetWriteConcern(lock.DefaultWriteConcern()).SetReadPreference(readpref.Primary()))
}

// updateJob applies update to the document of job name, and returns
// ErrUnknownJob if there is none.
func updateJob(ctx context.Context, coll *mongo.Collection, op, name string, update bson.D) error {
	res, err := coll.UpdateOne(ctx, bson.D{{Key: fieldID, Value: name}}, update)
	if err != nil {
		return wrapErr(ctx, op, name, err)
	}
	if res.MatchedCount == 0 {
		return unknownJob(coll, op, name)
	}
	return nil
}

func unknownJob(coll *mongo.Collection, op, name string) error {
	return fmt.Errorf("%s %q: %w: no document in %s", op, name, ErrUnknownJob, mongoutil.Namespace(coll))
}

// checkUntil checks that p ends after now, the store's time.
func checkUntil(name string, p Pause, now time.Time) error {
	if !p.Until.After(now) {
		return fmt.Errorf("%w: pause %q until %s: not after the server's time, %s", ErrInvalidOption, name,
			p.Until.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	}
	return nil
}

// removedJob is the error of a trigger of a removed job.
func removedJob(name string) error {
	return fmt.Errorf("trigger %q: %w (Resume brings it back)", name, ErrJobRemoved)
}

// Pause pauses the job called name, cluster-wide (PauseJob, on
// this Scheduler's jobs collection): it takes effect on every instance by
// the job's next firing, and survives restarts. The job must be registered
// here (else ErrUnknownJob). This Scheduler reports it (lock.JobPaused,
// Reason the note).
func (s *Scheduler) Pause(ctx context.Context, name string, p Pause) error {
	if err := checkCall("pause", ctx); err != nil {
		return err
	}
	j, err := s.controlled("pause", name)
	if err != nil {
		return err
	}
	if err := checkPause(name, p); err != nil {
		return err
	}
	if err := s.st.pauseJob(ctx, name, p); err != nil {
		return err
	}
	s.controlDone(j, lock.JobPaused, p.Note)
	return nil
}

// Resume resumes the job called name, cluster-wide (ResumeJob):
// it takes effect on every instance by the job's next firing, and survives
// restarts. The job must be registered here (else ErrUnknownJob). This
// Scheduler reports it (lock.JobResumed).
func (s *Scheduler) Resume(ctx context.Context, name string) error {
	if err := checkCall("resume", ctx); err != nil {
		return err
	}
	j, err := s.controlled("resume", name)
	if err != nil {
		return err
	}
	if err := s.st.resumeJob(ctx, name); err != nil {
		return err
	}
	s.controlDone(j, lock.JobResumed, "")
	return nil
}

// Trigger asks for one run of the job called name now (TriggerJob): one
// instance runs it, through the usual claim, lock and fence,
// this one at once if it claims it, every instance within the scheduler's
// poll interval (WithPollInterval) otherwise, even one that restarted
// meanwhile. It reports whether it made the request (false: one was
// already waiting, and covers this one). The job must be registered here
// (else ErrUnknownJob). This Scheduler reports a request it made
// (lock.JobTriggered).
func (s *Scheduler) Trigger(ctx context.Context, name string) (bool, error) {
	if err := checkCall("trigger", ctx); err != nil {
		return false, err
	}
	j, err := s.controlled("trigger", name)
	if err != nil {
		return false, err
	}
	made, err := s.st.triggerJob(ctx, name)
	if err != nil || !made {
		return made, err
	}
	s.controlDone(j, lock.JobTriggered, "")
	return true, nil
}

// Remove removes the job called name, cluster-wide (RemoveJob): it takes effect on every instance by the job's next firing, and
// survives restarts. It does not unregister the job here, nor stop a run
// in progress. The job must be registered here (else ErrUnknownJob). This
// Scheduler reports it (lock.JobRemoved).
func (s *Scheduler) Remove(ctx context.Context, name string) error {
	if err := checkCall("remove", ctx); err != nil {
		return err
	}
	j, err := s.controlled("remove", name)
	if err != nil {
		return err
	}
	if err := s.st.removeJob(ctx, name); err != nil {
		return err
	}
	s.controlDone(j, lock.JobRemoved, "")
	return nil
}

// controlled returns the registered job name for control operation op.
func (s *Scheduler) controlled(op, name string) (*job, error) {
	if err := checkControl(op, name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	j := s.jobs[name]
	s.mu.Unlock()
	if j == nil {
		return nil, fmt.Errorf("%s %q: %w: not registered with this scheduler", op, name, ErrUnknownJob)
	}
	return j, nil
}

// controlDone reports a control operation on j that succeeded, and wakes
// the loop so that this instance acts on it at once.
func (s *Scheduler) controlDone(j *job, kind lock.EventKind, reason string) {
	s.session.Emit(lock.Event{Kind: kind, Job: j.name, LockID: j.lockID, Reason: reason})
	s.poke()
	s.pollSoon() // a trigger is claimed by the poll, a removal noted there
}
