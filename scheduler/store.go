package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jonboulle/clockwork"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
)

// store persists claims and runs. mongoStore is the real one; tests of the
// timing logic use a fake.
type store interface {
	// register makes the documents of jobs that have none, so that they
	// can be paused before their first claim, and records the
	// registration's time as the last firing settled of those never
	// claimed: the server's, or now (this instance's clock) if earlier.
	register(ctx context.Context, jobs []regReq, now time.Time) error
	// claim records that keeper claimed firing f of job, unless a firing
	// at or after f was claimed before or an earlier claim's work is still
	// pending, and returns the work it won, nil if it lost. It may report
	// lost a claim it made but that a claim of a later firing overtook
	// before it could tell (a batch's read): never the reverse.
	// A catchUp claim is made only if an earlier firing was claimed.
	claim(ctx context.Context, job, spec string, f time.Time, keeper string, catchUp bool) (*work, error)
	// claimTrigger claims the run of job triggered at t (Trigger), unless
	// another instance did or a claim's work is pending.
	claimTrigger(ctx context.Context, job string, t time.Time, keeper string) (*work, error)
	// takeOver makes keeper's the pending work of jobs that from claimed,
	// and returns it. The caller holds from's presence lock: from's lease
	// has lapsed, and from can start none of it any more.
	takeOver(ctx context.Context, jobs []string, from, keeper string) ([]*work, error)
	// resume gives a new token to, and returns, the pending work of job if
	// keeper still holds it under token cid: nil if not.
	resume(ctx context.Context, job, keeper string, cid bson.ObjectID) (*work, error)
	// poll reads the documents of jobs with pending work, a trigger, or
	// removed.
	poll(ctx context.Context, jobs []claimReq) ([]jobDoc, error)
	// start records r, a firing or triggered run of w, as the job's running
	// run if w is still r.Keeper's and no firing at or after r's was
	// settled, and returns the server's start time. It is idempotent: a
	// retried write finds its own record and succeeds, and changes
	// nothing, whatever was claimed since. The write applies only before
	// deadline by the server's clock, if not zero and the server can tell
	// (mongoutil.Deadline); errNotStarted if it certainly did not apply
	// (refused for that alone, or not sent, whether the server evaluates
	// deadlines unknown): w's claim is still pending, and r not started.
	start(ctx context.Context, r Run, w *work, deadline time.Time) (time.Time, bool, error)
	// settle records that w's work is done without starting its last
	// firing (or its triggered run), if w is still its keeper's under its
	// token.
	settle(ctx context.Context, w *work) (bool, error)
	// finish records how r ended in the job document, and reports whether
	// the document still held r's record (no later run overwrote it, and
	// r's start was written). ran: the job was called, and its outcome
	// counts towards FailedInARow.
	finish(ctx context.Context, r Run, ran bool) (bool, error)
	// pauseAfter pauses job if its last n firings failed, and reports
	// whether it did.
	pauseAfter(ctx context.Context, job string, n int) (bool, error)
	// addHistory records r in the history, if history is kept. It is
	// idempotent.
	addHistory(ctx context.Context, r Run) error
	// addHistoryOnce records r in the history unless a record of its
	// firing (its id) is there already, which it keeps: how records of
	// firings not run are written.
	addHistoryOnce(ctx context.Context, r Run) error
	records(ctx context.Context, names []string) ([]Record, error)
	history(ctx context.Context, job string, limit int) ([]Run, error)
	// pauseJob, resumeJob, triggerJob and removeJob are PauseJob,
	// ResumeJob, TriggerJob and RemoveJob (control.go) of checked
	// arguments.
	pauseJob(ctx context.Context, job string, p Pause) error
	resumeJob(ctx context.Context, job string) error
	triggerJob(ctx context.Context, job string) (bool, error)
	removeJob(ctx context.Context, job string) error
}

// Field names of a job document {_id: name, last, spec, by, at, cid, keeper,
// scheduled, start, end, fence, outcome, error} (the last claim, then the last
// run, flat because FerretDB has no $currentDate on dotted paths) and of a
// history document {_id, job, keeper, scheduled, start, end, ...}.
const (
	fieldID        = "_id"
	fieldLast      = "last" // scheduled time of the last claimed firing
	fieldSpec      = "spec"
	fieldBy        = "by"  // keeper of the last claim
	fieldAt        = "at"  // server time of the last claim, resume or takeover
	fieldClaimID   = "cid" // the pending claim's token: every write of its work matches it
	fieldJob       = "job"
	fieldKeeper    = "keeper"
	fieldScheduled = "scheduled"
	fieldStart     = "start"
	fieldEnd       = "end"
	fieldFence     = "fence"
	fieldOutcome   = "outcome"
	fieldError     = "error"

	// The work a claim leaves to do: the firings after done up to last, or
	// a triggered run. See claims.go.
	fieldPending = "pend"  // true while the last claim's work is not settled
	fieldDone    = "done"  // the last firing settled: started, or recorded as not run
	fieldPTrig   = "ptrig" // the time of the triggered run the pending claim is for

	// Control, written by Pause, Resume, Trigger and Remove (control.go)
	// from any instance or tool, and read by every claim.
	fieldPaused    = "paused"  // true while paused
	fieldPauseNote = "pnote"   // the operator's note
	fieldPauseTill = "puntil"  // paused until then (server time), if set
	fieldPausedBy  = "pby"     // who paused it, if the tool said (Pause.By)
	fieldPausedAt  = "pat"     // server time of the last pause or removal
	fieldResumedAt = "rat"     // server time of the last resume
	fieldSuspended = "pwas"    // what the last of them was: ReasonPaused or ReasonRemoved
	fieldRemoved   = "removed" // true once removed: no instance runs it
	fieldTrigger   = "trig"    // server time of a trigger not claimed yet
	fieldFails     = "fails"   // failed firings in a row
	fieldAttempt   = "attempt" // attempt of the last run, from 1
	fieldRunClaim  = "rcid"    // the token of the claim the last run's start was written under
	fieldWent      = "went"    // the spans of earlier runs the last run's start kept (runDoc.Went)

	// Of runs and history records.
	fieldTriggered = "triggered"
	fieldThrough   = "through"
	fieldCount     = "count"
	fieldReason    = "reason"
)

// Index names EnsureIndexes creates on the runs collection.
const (
	HistoryIndexName    = "job_scheduled"
	HistoryTTLIndexName = "end_ttl"
)

type jobDoc struct {
	ID      string        `bson:"_id"`
	Last    time.Time     `bson:"last"`
	ClaimID bson.ObjectID `bson:"cid,omitempty"`
	Spec    string        `bson:"spec"`
	By      string        `bson:"by"`
	At      time.Time     `bson:"at,omitempty"`
	Pending bool          `bson:"pend,omitempty"`
	Done    time.Time     `bson:"done,omitempty"`
	PTrig   time.Time     `bson:"ptrig,omitempty"`
	Control controlDoc    `bson:",inline"`
	Run     runDoc        `bson:",inline"`
	Regs    regsDoc       `bson:"regs,omitempty"` // specs.go
	// Hash identifies the spec the cluster follows (Spec), SpecSince when
	// it became the job's: specs.go.
	Hash      string    `bson:"sh,omitempty"`
	SpecSince time.Time `bson:"ssat,omitempty"`
}

// controlDoc is what operators set on a job (control.go).
type controlDoc struct {
	Paused    bool      `bson:"paused,omitempty"`
	PauseNote string    `bson:"pnote,omitempty"`
	PauseTill time.Time `bson:"puntil,omitempty"`
	PausedBy  string    `bson:"pby,omitempty"`
	PausedAt  time.Time `bson:"pat,omitempty"`
	ResumedAt time.Time `bson:"rat,omitempty"`
	Suspended string    `bson:"pwas,omitempty"`
	Removed   bool      `bson:"removed,omitempty"`
	Trigger   time.Time `bson:"trig,omitempty"`
	Fails     int       `bson:"fails,omitempty"`
}

// suspendedAt says why a job under c does not run firing f at now, if it
// does not: it is removed, or paused now (nothing starts while a job is
// paused, not even a firing that fell before the pause), or f fell while
// it was paused or removed: from the last pause or removal to its end, or
// to the resume after it. Empty if it runs.
func (c *controlDoc) suspendedAt(f, now time.Time) string {
	switch {
	case c.Removed:
		return ReasonRemoved
	case c.pausedAt(now):
		return ReasonPaused
	case c.PausedAt.IsZero() || f.Before(c.PausedAt):
		return ""
	}
	var end time.Time // zero: no end
	// Not paused now, so a resume stamped in the pause's own millisecond
	// came after it (TestResumedInThePausesMillisecond).
	if !c.ResumedAt.IsZero() && !c.ResumedAt.Before(c.PausedAt) {
		end = c.ResumedAt
	}
	if c.Suspended != ReasonRemoved && !c.PauseTill.IsZero() && (end.IsZero() || c.PauseTill.Before(end)) {
		end = c.PauseTill
	}
	if end.IsZero() || f.Before(end) {
		return cmp.Or(c.Suspended, ReasonPaused)
	}
	return ""
}

// pausedAt reports whether the pause under c holds at t: it is paused,
// with no end or an end after t.
func (c *controlDoc) pausedAt(t time.Time) bool {
	return c.Paused && (c.PauseTill.IsZero() || c.PauseTill.After(t))
}

type runDoc struct {
	Job       string         `bson:"job,omitempty"`
	Keeper    string         `bson:"keeper"`
	Scheduled time.Time      `bson:"scheduled"`
	Start     time.Time      `bson:"start"`
	End       time.Time      `bson:"end,omitempty"`
	Fence     bson.Timestamp `bson:"fence"`
	Outcome   string         `bson:"outcome"`
	Error     string         `bson:"error,omitempty"`
	Attempt   int            `bson:"attempt,omitempty"`
	// Of a history record of firings not run (OutcomeSkipped): the last
	// firing it covers (Scheduled the first) and how many, and why.
	Through time.Time `bson:"through,omitempty"`
	Count   int       `bson:"count,omitempty"`
	Reason  string    `bson:"reason,omitempty"`
	Trigger bool      `bson:"triggered,omitempty"`
	// ClaimID is the token of the claim whose work the run's start
	// recorded (of a job document's run only).
	ClaimID bson.ObjectID `bson:"rcid,omitempty"`
	// Went (of a job document's run only) are the spans, by the server's
	// clock, of the job's earlier runs that may still skip a firing after
	// this run's (they ended after it, and went on longer than its lock
	// wait): a backlog run one after the other keeps them (wentBefore).
	Went []spanDoc `bson:"went,omitempty"`
}

// spanDoc is a span of a run, in a job document (runDoc.Went).
type spanDoc struct {
	From time.Time `bson:"from"`
	To   time.Time `bson:"to"`
}

func (d *runDoc) run(job string) *Run {
	if d.Scheduled.IsZero() {
		return nil // never ran
	}
	return &Run{
		Job:       job,
		Keeper:    d.Keeper,
		Scheduled: d.Scheduled,
		Start:     d.Start,
		End:       d.End,
		Fence:     uint64(d.Fence.T)<<32 | uint64(d.Fence.I),
		Outcome:   Outcome(d.Outcome),
		Error:     d.Error,
		Attempt:   max(d.Attempt, 1),
		Through:   d.Through,
		Count:     d.Count,
		Reason:    d.Reason,
		Triggered: d.Trigger,
	}
}

func fenceTS(f uint64) bson.Timestamp { return bson.Timestamp{T: uint32(f >> 32), I: uint32(f)} }

// historyID is the _id of a run in the history: a firing runs at most once,
// so the job, the firing (or trigger) and the attempt identify it, and
// recording it twice is harmless. A record of one firing not run has its
// firing's id: a run of the firing is recorded over it, and it is written
// only where the firing has no record: one record per firing.
func historyID(r Run) string {
	id := r.Job + "@" + r.Scheduled.UTC().Format(time.RFC3339Nano)
	if r.Triggered {
		// A trigger's server time can equal a firing's instant.
		id += "!trigger"
	}
	if r.Attempt > 1 {
		id += "#" + strconv.Itoa(r.Attempt)
	}
	return id
}

type mongoStore struct {
	jobs, runs  *mongo.Collection
	keepHistory bool
	bad         func(lock.BadDocument) // reports the documents its reads skip (baddoc.go)
	// deadlines: whether the server evaluates a start's deadline
	// (mongoutil.ProbeDeadlines), once a start asked: 0 not known yet,
	// 1 it does, 2 it does not.
	deadlines atomic.Int32

	// Writes of jobs that fire together go in shared commands.
	claims   *batcher[firingKey, claimReq, claimResult]
	starts   *batcher[firingKey, startReq, startResult]
	finishes *batcher[struct{}, finishReq, bool]
	adds     *batcher[struct{}, histReq, struct{}]
}

// firingKey groups the claims and starts of one keeper for one firing time.
type firingKey struct {
	f       int64 // UnixNano of the firing
	keeper  string
	catchUp bool // claims only of jobs claimed before
}

func keyOf(f time.Time, keeper string) firingKey { return firingKey{f: f.UnixNano(), keeper: keeper} }

// claimReq is a job to claim: its name and its spec, canonical
// (canonicalSpec): only a document whose spec is that one is claimed.
type claimReq struct{ job, spec string }

func (r claimReq) hash() string { return specHash(r.job, r.spec) }

type startResult struct {
	start time.Time
	ok    bool
	late  bool // refused for its deadline alone (startable)
}

func newMongoStore(db *mongo.Database, cfg config, clock clockwork.Clock) *mongoStore {
	// Majority with journal: a claim acknowledged by a primary that then
	// fails over must not be lost, or a firing could run twice. Reads from
	// the primary: the read after a batch of claims or starts decides which
	// succeeded, and a secondary may not have them yet.
	opts := options.Collection().SetWriteConcern(lock.DefaultWriteConcern()).SetReadPreference(readpref.Primary())
	s := &mongoStore{
		jobs:        db.Collection(cfg.jobsColl, opts),
		runs:        db.Collection(cfg.runsColl, opts),
		keepHistory: cfg.retention > 0,
	}
	s.claims = newBatcher(clock, cfg.opTimeout, s.claimBatch)
	s.starts = newBatcher(clock, cfg.opTimeout, s.startBatch)
	s.finishes = newBatcher(clock, cfg.opTimeout, s.finishBatch)
	s.adds = newBatcher(clock, cfg.opTimeout, s.historyBatch)
	return s
}

func (s *mongoStore) claim(ctx context.Context, job, spec string, f time.Time, keeper string, catchUp bool) (*work, error) {
	key := keyOf(f, keeper)
	key.catchUp = catchUp
	res, err := s.claims.submit(ctx, key, claimReq{job, spec})
	if err != nil {
		return nil, err
	}
	return res.w, res.err
}

type claimResult struct {
	w   *work // nil: lost
	err error
}

// recoveryTimeout bounds the read that finds out which claims of a batch
// were made after the update reported an error.
const recoveryTimeout = 2 * time.Second

// claimBatch claims firing f for each job in reqs that has had no claim of
// a firing at or after f. One job is one command; more are two: an update
// of those whose last claim is earlier, marking them with a fresh claim id,
// then a read of which carry it. Jobs whose documents do not exist yet
// (their first claims) cost two more together (firstClaims).
//
// A claim made by the update but overtaken by a claim of a later firing
// before the read is reported lost, and that firing skipped: another
// instance's clock must have reached the next firing within one round trip.
//
// An update that fails does not cost the whole batch its firings: one
// conflict (FerretDB 2.x breaks a deadlock between two instances' batches
// by failing one of them) or a broken connection would skip a thousand.
// The read after it tells which jobs are still claimable, and those are
// claimed again in halves, then quarters (claimRounds in all); only what
// the last round could not claim fails with its error.
func (s *mongoStore) claimBatch(ctx context.Context, key firingKey, reqs []claimReq) ([]claimResult, error) {
	f, keeper := time.Unix(0, key.f).UTC(), key.keeper
	out := make([]claimResult, len(reqs))
	if len(reqs) == 1 {
		out[0].w, out[0].err = s.claimOne(ctx, reqs[0], f, keeper, key.catchUp)
		return out, nil
	}
	todo := make([]int, len(reqs))
	for i := range todo {
		todo[i] = i
	}
	var missing []int // jobs never claimed: no document yet
	for round := 0; len(todo) > 0; round++ {
		var again []int
		for _, part := range split(todo, 1<<round) {
			if len(part) == 1 && round > 0 {
				i := part[0]
				out[i].w, out[i].err = s.claimOne(ctx, reqs[i], f, keeper, key.catchUp)
				continue
			}
			retry, miss, err := s.claimPart(ctx, key, reqs, part, out)
			missing = append(missing, miss...)
			if err == nil {
				continue
			}
			if round+1 == claimRounds || ctx.Err() != nil {
				fail(out, retry, err)
				continue
			}
			again = append(again, retry...)
		}
		todo = again
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		s.firstClaims(ctx, reqs, missing, f, keeper, bson.NewObjectID(), out)
	}
	return out, nil
}

// claimRounds is how many times claimBatch sends a job's claim, the batch
// split in two more parts each round.
const claimRounds = 3

// split cuts todo into at most n parts of nearly equal size.
func split(todo []int, n int) [][]int {
	n = min(n, len(todo))
	parts := make([][]int, 0, n)
	for k := range n {
		parts = append(parts, todo[k*len(todo)/n:(k+1)*len(todo)/n])
	}
	return parts
}

// claimPart is one round of claimBatch for the jobs reqs[i], i in part:
// an update and a read, with a claim id of its own. It sets the results in
// out of those it claimed, lost, or cannot tell, and returns those whose
// documents do not exist yet (missing, unless key is a catch-up claim),
// and, if the update failed, its error and the jobs the read found still
// claimable (retry): their results are not set.
func (s *mongoStore) claimPart(ctx context.Context, key firingKey, reqs []claimReq, part []int, out []claimResult) (retry, missing []int, _ error) {
	f, keeper := time.Unix(0, key.f).UTC(), key.keeper
	ids := make([]string, len(part))
	hashes := make([]string, len(part))
	for k, i := range part {
		ids[k], hashes[k] = reqs[i].job, reqs[i].hash()
	}
	cid := bson.NewObjectID()
	// Each document is updated atomically: of several instances claiming f
	// at once, one updates it and the others no longer match.
	_, updateErr := s.jobs.UpdateMany(ctx, claimFilter(bson.D{{Key: "$in", Value: ids}}, bson.D{{Key: "$in", Value: hashes}}, f, key.catchUp),
		claimUpdate(f, keeper, "", cid))
	readCtx := ctx
	if updateErr != nil {
		updateErr = mongoutil.WrapErr(ctx, fmt.Sprintf("claim firing of %d jobs", len(ids)), updateErr)
		// The update may have claimed some (it is not retried, and it is
		// not atomic across documents): read which carry the claim id, so
		// that those firings run rather than being lost to every instance.
		var cancel context.CancelFunc
		var ok bool
		if readCtx, cancel, ok = recoveryContext(ctx); !ok {
			fail(out, part, updateErr) // stopping
			return nil, nil, nil
		}
		defer cancel()
	}
	docs, err := s.jobDocs(readCtx, ids)
	if err != nil {
		fail(out, part, cmp.Or(updateErr, err))
		return nil, nil, nil
	}
	for _, i := range part {
		r := reqs[i]
		d, ok := docs[r.job]
		switch {
		case ok && d.ClaimID == cid && d.Last.Equal(f) && d.By == keeper:
			out[i].w = workOf(d)
		case !ok:
			if !key.catchUp {
				missing = append(missing, i)
			}
		case updateErr != nil && d.Hash == r.hash() && d.Last.Before(f) && d.Done.Before(f) && !d.Pending && (!key.catchUp || d.Last.After(neverClaimed)):
			retry = append(retry, i) // not written: claimable still
		}
		// Otherwise lost: out[i] stays zero.
	}
	if len(retry) == 0 {
		updateErr = nil
	}
	return retry, missing, updateErr
}

// firstClaims claims firing f for the jobs reqs[i], i in todo, whose
// documents did not exist, with the claim id cid, and sets their results
// in out: a bulk write of the upserts claimOne sends, then a read of which
// carry cid (claimOne itself for a single job). Like AcquireLocks, it
// decides by the read: FerretDB 1.24 ends a bulk write at its first failed
// write (a duplicate key: another instance made the document first)
// without saying which it skipped, and those are sent again.
func (s *mongoStore) firstClaims(ctx context.Context, reqs []claimReq, todo []int, f time.Time, keeper string, cid bson.ObjectID, out []claimResult) {
	for len(todo) > 0 {
		if len(todo) == 1 {
			i := todo[0]
			out[i].w, out[i].err = s.claimOne(ctx, reqs[i], f, keeper, false)
			return
		}
		models := make([]mongo.WriteModel, len(todo))
		ids := make([]string, len(todo))
		for k, i := range todo {
			r := reqs[i]
			ids[k] = r.job
			models[k] = mongo.NewUpdateOneModel().SetUpsert(true).
				SetFilter(claimFilter(r.job, r.hash(), f, false)).SetUpdate(claimUpdate(f, keeper, r.spec, cid))
		}
		readCtx := ctx
		_, writeErr := s.jobs.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
		if writeErr != nil && !mongoutil.OnlyDuplicateKeys(writeErr) {
			writeErr = mongoutil.WrapErr(ctx, fmt.Sprintf("claim first firing of %d jobs", len(todo)), writeErr)
			// Some upserts may have gone through: read which, as
			// claimBatch does after its update fails.
			var cancel context.CancelFunc
			var ok bool
			if readCtx, cancel, ok = recoveryContext(ctx); !ok {
				fail(out, todo, writeErr)
				return
			}
			defer cancel()
		} else {
			writeErr = nil
		}
		docs, err := s.jobDocs(readCtx, ids)
		if err != nil {
			fail(out, todo, cmp.Or(writeErr, err))
			return
		}
		next := todo[:0:0]
		for _, i := range todo {
			switch d, ok := docs[reqs[i].job]; {
			case ok && d.ClaimID == cid && d.Last.Equal(f) && d.By == keeper:
				out[i].w = workOf(d)
			case writeErr != nil:
				out[i].err = writeErr
			case ok && (!d.Last.Before(f) || d.Pending || d.Hash != reqs[i].hash()):
				// Lost: out[i] stays zero.
			default:
				next = append(next, i) // not written, or claimable again
			}
		}
		if writeErr != nil {
			return
		}
		if len(next) == len(todo) {
			fail(out, todo, fmt.Errorf("claim first firing of %d jobs: neither claimed nor lost", len(todo)))
			return
		}
		todo = next
	}
}

// claimFilter matches the documents of the jobs id selects (a job name, or
// an operator such as $in) whose spec is the claimant's (hash, or an
// operator: specs.go), whose last claim is for a firing before f and whose
// work is settled; for a catch-up claim, only if a firing was claimed
// before. An upsert copies id and hash into the document it makes.
func claimFilter(id, hash any, f time.Time, catchUp bool) bson.D {
	// Not a date at or after f: every claim the library writes is a date
	// from neverClaimed on, so this is last < f for those; a last that is
	// not a date (a hand edit, another tool) is claimed over, and the
	// claim writes it again (repairJob has the rest of the document).
	last := bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: f}}}}
	if catchUp {
		last = bson.D{{Key: "$lt", Value: f}, {Key: "$gt", Value: neverClaimed}}
	}
	// Nor before the last firing settled: after a registration that is
	// the registration's time (settleRegistered), and a firing before it,
	// reached by a clock behind the server's, is none of the job's.
	done := bson.E{Key: fieldDone, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: f}}}}}
	return bson.D{{Key: fieldID, Value: id}, {Key: fieldHash, Value: hash}, {Key: fieldLast, Value: last}, done, notPending}
}

// notPending matches documents whose last claim's work is settled.
var notPending = bson.E{Key: fieldPending, Value: bson.D{{Key: "$ne", Value: true}}}

// claimUpdate records keeper's claim of firing f, with spec unless it is
// empty, and the claim's token cid.
func claimUpdate(f time.Time, keeper, spec string, cid bson.ObjectID) bson.D {
	set := bson.D{{Key: fieldLast, Value: f}, {Key: fieldBy, Value: keeper}, {Key: fieldPending, Value: true}, {Key: fieldClaimID, Value: cid}}
	if spec != "" {
		set = append(set, bson.E{Key: fieldSpec, Value: spec})
	}
	return bson.D{{Key: "$currentDate", Value: bson.D{{Key: fieldAt, Value: true}}}, {Key: "$set", Value: set}}
}

// recoveryContext is the context of the read that finds out which claims
// a failed write made, not ended by ctx's deadline; ok is false if ctx was
// cancelled (the scheduler is stopping) and nothing should be read.
func recoveryContext(ctx context.Context) (_ context.Context, _ context.CancelFunc, ok bool) {
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil, nil, false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recoveryTimeout)
	return rctx, cancel, true
}

// fail sets err as the result of reqs[i] for i in todo.
func fail(out []claimResult, todo []int, err error) {
	for _, i := range todo {
		out[i].err = err
	}
}

func (s *mongoStore) claimOne(ctx context.Context, r claimReq, f time.Time, keeper string, catchUp bool) (*work, error) {
	// Matches only if every claim so far is for an earlier firing and its
	// work is settled. If the document exists otherwise, the upsert tries
	// to insert a second document with the same _id and fails with a
	// duplicate key error: the claim was lost. If it does not exist, this
	// is the job's first claim. The document after tells the work: the
	// firings after done, and what operators set.
	d, err := s.readOne(ctx, s.jobs.FindOneAndUpdate(ctx, claimFilter(r.job, r.hash(), f, catchUp), claimUpdate(f, keeper, r.spec, bson.NewObjectID()),
		options.FindOneAndUpdate().SetUpsert(!catchUp).SetReturnDocument(options.After)))
	switch {
	case mongoutil.IsDuplicateKey(err), errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, wrapErr(ctx, "claim", r.job, err)
	case !d.Last.Equal(f) || d.By != keeper:
		return nil, fmt.Errorf("claim %q: the server returned another claim", r.job)
	}
	return workOf(&d), nil
}

// jobDocs reads the documents of ids, by id.
func (s *mongoStore) jobDocs(ctx context.Context, ids []string) (map[string]*jobDoc, error) {
	docs, err := s.findJobs(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}}, len(ids),
		fmt.Sprintf("read %d jobs", len(ids)))
	if err != nil {
		return nil, err
	}
	out := make(map[string]*jobDoc, len(docs))
	for i := range docs {
		out[docs[i].ID] = &docs[i]
	}
	return out, nil
}

// findJobs reads the job documents filter matches, at most n of them, in
// one batch; what names the read in errors.
func (s *mongoStore) findJobs(ctx context.Context, filter bson.D, n int, what string) ([]jobDoc, error) {
	cur, err := s.jobs.Find(ctx, filter, mongoutil.OneBatch(n))
	if err != nil {
		return nil, mongoutil.WrapErr(ctx, what, err)
	}
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var docs []jobDoc
	for cur.Next(ctx) {
		// One bad document costs its own job at most, not the others
		// read with it (readJobDoc).
		if d, err := s.readJobDoc(ctx, cur.Current); err == nil {
			docs = append(docs, d)
		}
	}
	if err := cur.Err(); err != nil {
		return nil, mongoutil.WrapErr(ctx, what, err)
	}
	return docs, nil
}

// readOne reads the job document res holds, as readJobDoc.
func (s *mongoStore) readOne(ctx context.Context, res *mongo.SingleResult) (jobDoc, error) {
	raw, err := res.Raw()
	if err != nil {
		return jobDoc{}, err
	}
	return s.readJobDoc(ctx, raw)
}

func (s *mongoStore) start(ctx context.Context, r Run, w *work, deadline time.Time) (time.Time, bool, error) {
	if !deadline.IsZero() {
		switch ok, err := s.evaluatesDeadlines(ctx, r.Job); {
		case err != nil:
			// Not sent without its deadline, which it may need (seed 498:
			// a slow probe, the lease lost meanwhile, a start sent
			// without one applied and spent the firing).
			return time.Time{}, false, fmt.Errorf("record start of %q: not sent: %w (%w)", r.Job, err, errNotStarted)
		case !ok:
			deadline = time.Time{}
		}
	}
	res, err := s.starts.submit(ctx, keyOf(r.Scheduled, r.Keeper), startReq{r, w, deadline})
	if err == nil && res.late {
		err = fmt.Errorf("record start of %q: refused, its deadline had passed by the server's clock (%w)", r.Job, errNotStarted)
	}
	return res.start, res.ok, err
}

// errNotStarted: a start that certainly did not apply: refused because
// the server's clock had passed its deadline, or never sent.
var errNotStarted = errors.New("start not applied")

// evaluatesDeadlines reports whether the server evaluates a start's
// deadline, probing it the first time (and again after a probe failed,
// whose error it returns) on job's document (there, as its claim is).
func (s *mongoStore) evaluatesDeadlines(ctx context.Context, job string) (bool, error) {
	switch s.deadlines.Load() {
	case 1:
		return true, nil
	case 2:
		return false, nil
	}
	ok, err := mongoutil.ProbeDeadlines(ctx, s.jobs, job)
	switch {
	case err != nil:
		return false, fmt.Errorf("probe whether the server evaluates deadlines: %w", err)
	case ok:
		s.deadlines.Store(1)
	default:
		s.deadlines.Store(2)
	}
	return ok, nil
}

type startReq struct {
	r        Run
	w        *work
	deadline time.Time
}

// startFilter matches the document of r's job if r may start: w is still
// its claimant's, under w's token, and (for a firing) no firing at or
// after r's was settled, so
// that the firings of a claim start in order and none twice; and, if
// deadline is not zero, the server's clock has not reached it. A write
// retried after it was applied (the driver retries on network errors, and
// FerretDB does not recognise the retry) matches nothing: applied again,
// it would settle whatever claim came since. The read after it finds r's
// record (startOf), or the claim as it was (startable): refused for the
// deadline alone.
func startFilter(r Run, w *work, deadline time.Time) bson.D {
	filter := bson.D{{Key: fieldID, Value: r.Job}, {Key: fieldBy, Value: w.keeper}, {Key: fieldClaimID, Value: w.cid},
		{Key: fieldPending, Value: true}}
	if !deadline.IsZero() {
		filter = append(filter, mongoutil.Deadline(deadline))
	}
	if w.triggered() {
		return append(filter, bson.E{Key: fieldPTrig, Value: w.trig})
	}
	return append(filter, bson.E{Key: fieldLast, Value: w.last},
		bson.E{Key: fieldDone, Value: bson.D{{Key: "$not", Value: bson.D{{Key: "$gte", Value: r.Scheduled}}}}})
}

// startable reports whether startFilter, but for its deadline, matches d.
func (d *jobDoc) startable(r Run, w *work) bool {
	if d == nil || !d.Pending || d.By != w.keeper || d.ClaimID != w.cid {
		return false
	}
	if w.triggered() {
		return d.PTrig.Equal(w.trig)
	}
	return d.Last.Equal(w.last) && (d.Done.IsZero() || d.Done.Before(r.Scheduled))
}

// startOf returns r's start if d holds r's record, written for w: r
// started, by this write or by an earlier one of the same write (not by
// another work of the same firing under the same lease).
func (d *jobDoc) startOf(r Run, w *work) (time.Time, bool) {
	if d == nil || !d.Run.holds(r) || d.Run.Start.IsZero() || d.Run.ClaimID != w.cid {
		return time.Time{}, false
	}
	return d.Run.Start, true
}

// startUpdate records r as running and settles its firing: the work is
// no longer pending once its last firing, or its triggered run, starts.
func startUpdate(r Run, w *work) bson.D {
	set := bson.D{
		{Key: fieldKeeper, Value: r.Keeper},
		{Key: fieldScheduled, Value: r.Scheduled},
		{Key: fieldFence, Value: fenceTS(r.Fence)},
		{Key: fieldOutcome, Value: string(OutcomeRunning)},
		{Key: fieldAttempt, Value: max(r.Attempt, 1)},
		{Key: fieldTriggered, Value: r.Triggered},
		{Key: fieldRunClaim, Value: w.cid},
	}
	unset := bson.D{{Key: fieldEnd, Value: ""}, {Key: fieldError, Value: ""}}
	if len(w.went) == 0 {
		unset = append(unset, bson.E{Key: fieldWent, Value: ""})
	} else {
		set = append(set, bson.E{Key: fieldWent, Value: w.went})
	}
	now := bson.D{{Key: fieldStart, Value: true}}
	switch {
	case w.triggered():
		// The window of the last firing's claim stays: a triggered run
		// blocks claims too, but the claim after it is the one that
		// covers the firings that fell meanwhile, and those before.
		set = append(set, bson.E{Key: fieldPending, Value: false})
		unset = append(unset, bson.E{Key: fieldPTrig, Value: ""})
	case r.Scheduled.Equal(w.last):
		set = append(set, bson.E{Key: fieldDone, Value: r.Scheduled}, bson.E{Key: fieldPending, Value: false})
	default:
		set = append(set, bson.E{Key: fieldDone, Value: r.Scheduled})
	}
	return bson.D{
		{Key: "$set", Value: set},
		{Key: "$unset", Value: unset},
		{Key: "$currentDate", Value: now},
	}
}

// startBatch records the starts of runs of one firing by one keeper: one
// command for one run, two for more (the updates in one ordered bulk write,
// then a read of which documents hold their run).
func (s *mongoStore) startBatch(ctx context.Context, _ firingKey, reqs []startReq) ([]startResult, error) {
	if len(reqs) == 1 {
		res, err := s.startOne(ctx, reqs[0])
		return []startResult{res}, err
	}
	models := make([]mongo.WriteModel, len(reqs))
	ids := make([]string, len(reqs))
	runs := make([]Run, len(reqs))
	for i, q := range reqs {
		models[i] = mongo.NewUpdateOneModel().SetFilter(startFilter(q.r, q.w, q.deadline)).SetUpdate(startUpdate(q.r, q.w))
		ids[i], runs[i] = q.r.Job, q.r
	}
	// Ordered: FerretDB 1.24 stops an unordered bulk write at its first
	// error without saying so. These updates cannot fail one by one (no
	// upsert), so order costs nothing.
	if _, err := s.jobs.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true)); err != nil {
		return nil, mongoutil.WrapErr(ctx, "record start of "+runsDesc(runs), err)
	}
	docs, err := s.jobDocs(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]startResult, len(reqs))
	for i, q := range reqs {
		out[i] = docs[q.r.Job].startResult(q)
	}
	return out, nil
}

// startResult is what d, read after q's write, says of it.
func (d *jobDoc) startResult(q startReq) startResult {
	if start, ok := d.startOf(q.r, q.w); ok {
		return startResult{start: start, ok: true}
	}
	return startResult{late: !q.deadline.IsZero() && d.startable(q.r, q.w)}
}

func (s *mongoStore) startOne(ctx context.Context, q startReq) (startResult, error) {
	r, w := q.r, q.w
	// No projection: FerretDB does not implement it in findAndModify.
	opts := options.FindOneAndUpdate().SetReturnDocument(options.After)
	doc, err := s.readOne(ctx, s.jobs.FindOneAndUpdate(ctx, startFilter(r, w, q.deadline), startUpdate(r, w), opts))
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		// Refused, or retried after it was applied: r's record tells.
		docs, err := s.jobDocs(ctx, []string{r.Job})
		if err != nil {
			return startResult{}, err
		}
		return docs[r.Job].startResult(q), nil
	case err != nil:
		return startResult{}, wrapErr(ctx, "record start of", r.Job, err)
	case doc.Run.Start.IsZero():
		return startResult{}, fmt.Errorf("record start of %q: server returned no start time", r.Job)
	}
	return startResult{start: doc.Run.Start, ok: true}, nil
}

// settle marks w's work done, if it is still w's keeper's: nothing of it
// is pending any more (its firings were recorded as not run).
func (s *mongoStore) settle(ctx context.Context, w *work) (bool, error) {
	filter := bson.D{{Key: fieldID, Value: w.job}, {Key: fieldBy, Value: w.keeper}, {Key: fieldClaimID, Value: w.cid},
		{Key: fieldPending, Value: true}}
	set := bson.D{{Key: fieldPending, Value: false}}
	update := bson.D{{Key: "$unset", Value: bson.D{{Key: fieldPTrig, Value: ""}}}}
	if w.triggered() {
		filter = append(filter, bson.E{Key: fieldPTrig, Value: w.trig})
	} else {
		filter = append(filter, bson.E{Key: fieldLast, Value: w.last},
			bson.E{Key: fieldPTrig, Value: bson.D{{Key: "$exists", Value: false}}})
		set = append(set, bson.E{Key: fieldDone, Value: w.last})
	}
	res, err := s.jobs.UpdateOne(ctx, filter, append(update, bson.E{Key: "$set", Value: set}))
	if err != nil {
		return false, wrapErr(ctx, "settle claim of", w.job, err)
	}
	if res.MatchedCount == 1 {
		return true, nil
	}
	// Settled already, by an attempt whose reply was lost (or that applied
	// late)? Then the document still has w's token, and is not pending:
	// no claim after it, nor a takeover, changed it.
	docs, err := s.jobDocs(ctx, []string{w.job})
	if err != nil {
		return false, wrapErr(ctx, "settle claim of", w.job, err)
	}
	d := docs[w.job]
	return d != nil && d.ClaimID == w.cid && d.By == w.keeper && !d.Pending && (w.triggered() || d.Done.Equal(w.last)), nil
}

// notRunError begins the error of a run whose start was written but whose
// job was not called (the lease lost, or Stop, as it was written): it did
// not go on, and skips no firing (runDoc.spans).
const notRunError = "not run: "

func (s *mongoStore) claimTrigger(ctx context.Context, job string, t time.Time, keeper string) (*work, error) {
	d, err := s.readOne(ctx, s.jobs.FindOneAndUpdate(ctx,
		bson.D{{Key: fieldID, Value: job}, {Key: fieldTrigger, Value: t}, notPending},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: fieldBy, Value: keeper}, {Key: fieldPending, Value: true}, {Key: fieldPTrig, Value: t},
				{Key: fieldClaimID, Value: bson.NewObjectID()}}},
			{Key: "$unset", Value: bson.D{{Key: fieldTrigger, Value: ""}}},
			{Key: "$currentDate", Value: bson.D{{Key: fieldAt, Value: true}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After)))
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, wrapErr(ctx, "claim trigger of", job, err)
	}
	return workOf(&d), nil
}

// takeOver makes keeper's, with a fresh claim id, the pending work of jobs
// that from claimed, then reads which documents carry that id.
func (s *mongoStore) takeOver(ctx context.Context, jobs []string, from, keeper string) ([]*work, error) {
	cid := bson.NewObjectID()
	res, err := s.jobs.UpdateMany(ctx,
		bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: jobs}}}, {Key: fieldPending, Value: true}, {Key: fieldBy, Value: from}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: fieldBy, Value: keeper}, {Key: fieldClaimID, Value: cid}}},
			{Key: "$currentDate", Value: bson.D{{Key: fieldAt, Value: true}}},
		})
	if err != nil {
		// Some may have been taken: the next poll finds them pending and
		// this keeper's, and resumes them.
		return nil, mongoutil.WrapErr(ctx, fmt.Sprintf("take over the claims of %q", from), err)
	}
	if res.ModifiedCount == 0 {
		return nil, nil
	}
	docs, err := s.findJobs(ctx, bson.D{{Key: fieldClaimID, Value: cid}, {Key: fieldBy, Value: keeper}, {Key: fieldPending, Value: true}},
		len(jobs), fmt.Sprintf("read the claims taken over from %q", from))
	if err != nil {
		return nil, err
	}
	out := make([]*work, len(docs))
	for i := range docs {
		out[i] = workOf(&docs[i])
	}
	return out, nil
}

func (s *mongoStore) resume(ctx context.Context, job, keeper string, cid bson.ObjectID) (*work, error) {
	d, err := s.readOne(ctx, s.jobs.FindOneAndUpdate(ctx,
		bson.D{{Key: fieldID, Value: job}, {Key: fieldPending, Value: true}, {Key: fieldBy, Value: keeper}, {Key: fieldClaimID, Value: cid}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldClaimID, Value: bson.NewObjectID()}}},
			{Key: "$currentDate", Value: bson.D{{Key: fieldAt, Value: true}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)))
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return nil, nil
	case err != nil:
		return nil, wrapErr(ctx, "resume claim of", job, err)
	}
	return workOf(&d), nil
}

func (s *mongoStore) poll(ctx context.Context, jobs []claimReq) ([]jobDoc, error) {
	ids := make([]string, len(jobs))
	hashes := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i], hashes[i] = j.job, j.hash()
	}
	return s.findJobs(ctx, bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "$or", Value: bson.A{
		bson.D{{Key: fieldPending, Value: true}},
		bson.D{{Key: fieldTrigger, Value: bson.D{{Key: "$exists", Value: true}}}},
		bson.D{{Key: fieldRemoved, Value: true}},
		// Specs superseded (specs.go): the hash holds the job's name,
		// so no job's hash is another's.
		bson.D{{Key: fieldHash, Value: bson.D{{Key: "$exists", Value: true}, {Key: "$nin", Value: hashes}}}},
	}}}, len(jobs), fmt.Sprintf("poll %d jobs", len(jobs)))
}

// neverClaimed is the last claim of a job registered but never claimed:
// before every firing, and not the zero time, which BSON would not keep
// apart from "no time".
var neverClaimed = time.Unix(0, 0).UTC()

// register upserts a document for each job that has none, and makes each
// job's spec the one the cluster follows (specs.go): a document whose spec
// is another gets this one, and the time it changed. Two instances
// registering a job at once may collide on its _id: the write is then
// sent again, and finds the document there.
//
// The upsert's filter has a condition besides the _id (upsertGuard) that
// every job document meets (its last claim, which every write that makes
// one sets): FerretDB 2.x runs an _id-only upsert that collides as a
// replacement of the document there, so that both racers would report an
// insert and the second's document, last claim and all, would replace the
// first's, however far its claims had gone meanwhile.
func (s *mongoStore) register(ctx context.Context, jobs []regReq, now time.Time) error {
	models := make([]mongo.WriteModel, 0, 3*len(jobs))
	for _, j := range jobs {
		h := j.hash()
		models = append(models,
			mongo.NewUpdateOneModel().SetUpsert(true).
				SetFilter(bson.D{{Key: fieldID, Value: j.job}, upsertGuard(fieldLast)}).
				SetUpdate(append(bson.D{{Key: "$setOnInsert", Value: bson.D{{Key: fieldLast, Value: neverClaimed},
					{Key: fieldSpec, Value: j.spec}, {Key: fieldHash, Value: h}}}},
					registration(j)...)),
			// A document from before specs were compared: the spec is
			// taken to have been the job's all along.
			mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: fieldID, Value: j.job}, {Key: fieldHash, Value: bson.D{{Key: "$exists", Value: false}}}}).
				SetUpdate(bson.D{{Key: "$set", Value: bson.D{{Key: fieldSpec, Value: j.spec}, {Key: fieldHash, Value: h}}}}),
			mongo.NewUpdateOneModel().
				SetFilter(bson.D{{Key: fieldID, Value: j.job}, {Key: fieldHash, Value: bson.D{{Key: "$ne", Value: h}}}}).
				SetUpdate(bson.D{
					{Key: "$set", Value: bson.D{{Key: fieldSpec, Value: j.spec}, {Key: fieldHash, Value: h}}},
					{Key: "$currentDate", Value: bson.D{{Key: fieldSpecSince, Value: true}}},
				}))
	}
	if err := upsertBatch(ctx, s.jobs, models); err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("register %d jobs", len(jobs)), err)
	}
	return s.settleRegistered(ctx, jobs, now)
}

// upsertGuard is the condition, besides the _id, of an upsert that must
// not replace a document a racer inserted: field, which every document the
// upsert may meet has. On FerretDB 2.x an upsert whose filter is the _id
// alone that collides with a document inserted meanwhile replaces it with
// its own and reports an insert; with another condition the insert fails
// with a duplicate key, as on MongoDB, and upsertBatch sends it again,
// to find the document there.
func upsertGuard(field string) bson.E {
	return bson.E{Key: field, Value: bson.D{{Key: "$exists", Value: true}}}
}

// upsertBatch sends models, in order, again while only duplicate keys
// fail (an upsert's insert collided with a racer's, a few times at most):
// sent again, each such upsert matches the document the racer made. A
// document without the upserts' guard field (upsertGuard), which the
// library never writes, keeps failing: its error is returned.
func upsertBatch(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel) error {
	var err error
	for range 3 {
		if _, err = coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true)); err == nil || !mongoutil.OnlyDuplicateKeys(err) {
			break
		}
	}
	return err
}

// settleRegistered records, in the documents of jobs never claimed, when
// the job was registered as the last firing settled: the server's time or
// the registering instance's (now), whichever is earlier. A job's first
// claim then covers every firing since its registration, not its own
// alone (a first claim that failed left the firings before the next one
// unrecorded), and no firing before it: a claim of one loses (claimFilter).
// The earlier of the two clocks, so that an instance whose clock is behind
// the server's still claims the firings after its registration by its
// own. A claim made meanwhile has moved last on, and the document is left
// as it is. A failure is tried again by the next registration.
func (s *mongoStore) settleRegistered(ctx context.Context, jobs []regReq, now time.Time) error {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.job
	}
	never := bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: ids}}}, {Key: fieldLast, Value: neverClaimed}}
	_, err := s.jobs.BulkWrite(ctx, []mongo.WriteModel{
		mongo.NewUpdateManyModel().SetFilter(append(never, bson.E{Key: fieldDone, Value: bson.D{{Key: "$exists", Value: false}}})).
			SetUpdate(bson.D{{Key: "$currentDate", Value: bson.D{{Key: fieldDone, Value: true}}}}),
		mongo.NewUpdateManyModel().SetFilter(never).SetUpdate(bson.D{{Key: "$min", Value: bson.D{{Key: fieldDone, Value: now}}}}),
	}, options.BulkWrite().SetOrdered(true))
	if err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("register %d jobs", len(jobs)), err)
	}
	return nil
}

// MaxErrorLen bounds the error text recorded of a run, in bytes: a job's
// error is kept whole in its RunEnded event, and cut in the records, so
// that one huge error cannot make the batch of records it shares a command
// with fail (MongoDB's 16 MB document limit).
const MaxErrorLen = 4096

// truncateError cuts msg to MaxErrorLen bytes, on a rune boundary, saying
// so.
func truncateError(msg string) string {
	if len(msg) <= MaxErrorLen {
		return msg
	}
	const more = "… (truncated)"
	cut := MaxErrorLen - len(more)
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + more
}

// runsDesc names the jobs of a batch of runs in errors: the job, quoted,
// when there is one.
func runsDesc(runs []Run) string {
	if len(runs) == 1 {
		return fmt.Sprintf("%q", runs[0].Job)
	}
	return fmt.Sprintf("%d jobs", len(runs))
}

// holds reports whether d is the record of r: the same firing, keeper and
// lease.
func (d *runDoc) holds(r Run) bool {
	return d.Scheduled.Equal(r.Scheduled) && d.Keeper == r.Keeper && d.Fence == fenceTS(r.Fence)
}

func (s *mongoStore) finish(ctx context.Context, r Run, ran bool) (bool, error) {
	return s.finishes.submit(ctx, struct{}{}, finishReq{r, ran})
}

type finishReq struct {
	r   Run
	ran bool
}

func finishModel(q finishReq) *mongo.UpdateOneModel {
	r := q.r
	set := bson.D{{Key: fieldOutcome, Value: string(r.Outcome)}, {Key: fieldAttempt, Value: max(r.Attempt, 1)}}
	if r.Error != "" {
		set = append(set, bson.E{Key: fieldError, Value: truncateError(r.Error)})
	}
	// The server's time of the write, unless the caller says when the run
	// ended (Scheduler.endOf).
	update := bson.D{{Key: "$currentDate", Value: bson.D{{Key: fieldEnd, Value: true}}}}
	if !r.End.IsZero() {
		update, set = nil, append(set, bson.E{Key: fieldEnd, Value: r.End})
	}
	switch {
	case q.ran && r.Outcome == OutcomeSucceeded:
		set = append(set, bson.E{Key: fieldFails, Value: 0})
	case q.ran:
		update = append(update, bson.E{Key: "$inc", Value: bson.D{{Key: fieldFails, Value: 1}}})
	}
	// Only this run's record: if a later run started meanwhile (this one
	// lost its lease), its record stays, even if it is of the same firing
	// and keeper (a trigger at the firing's instant). And only once: a
	// write sent again after it applied matches nothing (it would count
	// a failure twice).
	return mongo.NewUpdateOneModel().
		SetFilter(bson.D{{Key: fieldID, Value: r.Job}, {Key: fieldScheduled, Value: r.Scheduled}, {Key: fieldKeeper, Value: r.Keeper},
			{Key: fieldFence, Value: fenceTS(r.Fence)}, {Key: fieldOutcome, Value: string(OutcomeRunning)}}).
		SetUpdate(append(update, bson.E{Key: "$set", Value: set}))
}

// finishBatch records how runs ended, in one ordered bulk write, and
// reports for each whether its job's document held its record. Only when
// some did not is a read needed to tell which.
func (s *mongoStore) finishBatch(ctx context.Context, _ struct{}, reqs []finishReq) ([]bool, error) {
	models := make([]mongo.WriteModel, len(reqs))
	ids := make([]string, len(reqs))
	runs := make([]Run, len(reqs))
	for i, q := range reqs {
		models[i] = finishModel(q)
		ids[i], runs[i] = q.r.Job, q.r
	}
	res, err := s.jobs.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(true))
	if err != nil {
		return nil, mongoutil.WrapErr(ctx, "record end of "+runsDesc(runs), err)
	}
	out := make([]bool, len(reqs))
	if int(res.MatchedCount) == len(reqs) {
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	// Some did not match: not held (a later run's record), or ended
	// already (a retried write): the documents tell.
	docs, err := s.jobDocs(ctx, ids)
	if err != nil {
		return nil, err
	}
	for i, r := range runs {
		if d := docs[r.Job]; d != nil {
			out[i] = d.Run.holds(r) && !d.Run.End.IsZero()
		}
	}
	return out, nil
}

// pauseNote is the note of a job paused by JobPauseAfter.
func pauseNote(n int) string { return fmt.Sprintf("paused after %d failed firings in a row", n) }

func (s *mongoStore) pauseAfter(ctx context.Context, job string, n int) (bool, error) {
	res, err := s.jobs.UpdateOne(ctx,
		bson.D{{Key: fieldID, Value: job}, {Key: fieldFails, Value: bson.D{{Key: "$gte", Value: n}}}, {Key: fieldPaused, Value: bson.D{{Key: "$ne", Value: true}}}},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: fieldPaused, Value: true}, {Key: fieldPauseNote, Value: pauseNote(n)},
				{Key: fieldSuspended, Value: ReasonPaused}}},
			{Key: "$unset", Value: bson.D{{Key: fieldPauseTill, Value: ""}, {Key: fieldPausedBy, Value: ""}}},
			{Key: "$currentDate", Value: bson.D{{Key: fieldPausedAt, Value: true}}},
		})
	if err != nil {
		return false, wrapErr(ctx, "pause", job, err)
	}
	return res.ModifiedCount == 1, nil
}

func (s *mongoStore) addHistory(ctx context.Context, r Run) error {
	return s.addToHistory(ctx, histReq{r: r})
}

func (s *mongoStore) addHistoryOnce(ctx context.Context, r Run) error {
	return s.addToHistory(ctx, histReq{r: r, once: true})
}

func (s *mongoStore) addToHistory(ctx context.Context, q histReq) error {
	if !s.keepHistory {
		return nil
	}
	_, err := s.adds.submit(ctx, struct{}{}, q)
	return err
}

// histReq is a history record to write: r, replacing any record of its
// firing, or if once, only where there is none.
type histReq struct {
	r    Run
	once bool
}

// historyBatch upserts runs into the history by id, in one ordered bulk
// write: a run written twice (a retry) is the same document. Each upsert
// is guarded (upsertGuard: every record has its job), so that one racing
// another's insert of the same firing's record (a run's and a record of
// the firing not run, after a takeover) fails and is sent again instead
// of replacing it on FerretDB 2.x: a record written once never replaces
// one, and a run's record replaces one of the firing not run.
func (s *mongoStore) historyBatch(ctx context.Context, _ struct{}, reqs []histReq) ([]struct{}, error) {
	models := make([]mongo.WriteModel, len(reqs))
	runs := make([]Run, len(reqs))
	for i, q := range reqs {
		r := q.r
		runs[i] = r
		set, unset := historyDoc(r)
		var update bson.D
		if q.once {
			// Written only where no record of the firing is: its end is
			// the caller's (r.End), as $currentDate would change the end
			// of the record kept.
			end := r.End
			if end.IsZero() {
				end = time.Now()
			}
			update = bson.D{{Key: "$setOnInsert", Value: append(set, bson.E{Key: fieldEnd, Value: end})}}
		} else {
			// The server's time of the write, unless the caller says when
			// the run ended (Scheduler.endOf).
			update = bson.D{{Key: "$set", Value: set}, {Key: "$currentDate", Value: bson.D{{Key: fieldEnd, Value: true}}}}
			if !r.End.IsZero() {
				update = bson.D{{Key: "$set", Value: append(set, bson.E{Key: fieldEnd, Value: r.End})}}
			}
			if len(unset) > 0 {
				// A record of the firing there already (a firing first
				// recorded as not run, then run after all) is replaced
				// whole, not merged.
				update = append(update, bson.E{Key: "$unset", Value: unset})
			}
		}
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: fieldID, Value: historyID(r)}, upsertGuard(fieldJob)}).
			SetUpdate(update).
			SetUpsert(true)
	}
	if err := upsertBatch(ctx, s.runs, models); err != nil {
		return nil, mongoutil.WrapErr(ctx, "record history of "+runsDesc(runs), err)
	}
	return make([]struct{}, len(reqs)), nil
}

// historyDoc is r's history record, its fields to set and (for $unset)
// the optional fields it has not.
func historyDoc(r Run) (set, unset bson.D) {
	set = bson.D{
		{Key: fieldJob, Value: r.Job},
		{Key: fieldKeeper, Value: r.Keeper},
		{Key: fieldScheduled, Value: r.Scheduled},
		{Key: fieldStart, Value: r.Start},
		{Key: fieldFence, Value: fenceTS(r.Fence)},
		{Key: fieldOutcome, Value: string(r.Outcome)},
	}
	opt := func(key string, v any, has bool) {
		if has {
			set = append(set, bson.E{Key: key, Value: v})
		} else {
			unset = append(unset, bson.E{Key: key, Value: ""})
		}
	}
	opt(fieldError, truncateError(r.Error), r.Error != "")
	opt(fieldAttempt, r.Attempt, r.Attempt > 1)
	opt(fieldTriggered, true, r.Triggered)
	skipped := r.Outcome == OutcomeSkipped
	// One record a firing: through and count are of older versions'
	// records of several, which a record written now replaces.
	opt(fieldThrough, nil, false)
	opt(fieldCount, nil, false)
	opt(fieldReason, r.Reason, skipped)
	return set, unset
}

func (s *mongoStore) records(ctx context.Context, names []string) ([]Record, error) {
	recs, bad, err := LoadRecords(ctx, s.jobs, names...)
	s.reportBad(bad)
	return recs, err
}

func (s *mongoStore) history(ctx context.Context, job string, limit int) ([]Run, error) {
	runs, bad, err := LoadHistory(ctx, s.runs, job, limit)
	s.reportBad(bad)
	return runs, err
}

// reportBad hands the documents a read skipped to s.bad.
func (s *mongoStore) reportBad(bad []lock.BadDocument) {
	if s.bad == nil {
		return
	}
	for _, b := range bad {
		s.bad(b)
	}
}

// The controls, on s.jobs: it has controlColl's write concern and read
// preference.

func (s *mongoStore) pauseJob(ctx context.Context, job string, p Pause) error {
	return pauseIn(ctx, s.jobs, job, p)
}

func (s *mongoStore) resumeJob(ctx context.Context, job string) error {
	return resumeIn(ctx, s.jobs, job)
}

func (s *mongoStore) triggerJob(ctx context.Context, job string) (bool, error) {
	return triggerIn(ctx, s.jobs, job)
}

func (s *mongoStore) removeJob(ctx context.Context, job string) error {
	return removeIn(ctx, s.jobs, job)
}

// LoadRecords reads the job documents in coll (the jobs collection,
// DefaultJobsCollection unless WithJobsCollection) for names, or for every
// job if names is empty, sorted by name, from the primary whatever coll's
// read preference. A pause whose end has passed by the server's clock
// (read then, if some pause has an end) is over: its Record is not
// Paused. A document it cannot read is skipped and returned in bad
// (lock.BadDocument); the error is the read's. It needs no Scheduler, for
// tools such as the CLI.
func LoadRecords(ctx context.Context, coll *mongo.Collection, names ...string) (recs []Record, bad []lock.BadDocument, err error) {
	if err := checkColl("load records", ctx, coll, "jobs"); err != nil {
		return nil, nil, err
	}
	filter := bson.D{}
	if len(names) > 0 {
		filter = bson.D{{Key: fieldID, Value: bson.D{{Key: "$in", Value: names}}}}
	}
	cur, err := mongoutil.Primary(coll).Find(ctx, filter, options.Find().SetSort(bson.D{{Key: fieldID, Value: 1}}))
	if err != nil {
		return nil, nil, wrapErr(ctx, "read jobs from", coll.Name(), err)
	}
	docs, bad, err := readJobs(ctx, cur, coll.Name())
	if err != nil {
		return nil, nil, wrapErr(ctx, "read jobs from", coll.Name(), err)
	}
	recs, err = recordsOf(ctx, coll, docs)
	if err != nil {
		return nil, nil, err
	}
	return recs, bad, nil
}

// readJobs reads the job documents of cur, and those it cannot read.
func readJobs(ctx context.Context, cur *mongo.Cursor, coll string) (docs []jobDoc, bad []lock.BadDocument, err error) {
	bad, err = readEach(ctx, cur, coll, func(raw bson.Raw) (string, error) {
		d, field, err := decodeJob(raw)
		if err == nil {
			docs = append(docs, d)
		}
		return field, err
	})
	return docs, bad, err
}

// recordsOf is what docs say of their jobs, at the server's time if some
// pause has an end.
func recordsOf(ctx context.Context, coll *mongo.Collection, docs []jobDoc) ([]Record, error) {
	var now time.Time // only pauses with an end need it
	if slices.ContainsFunc(docs, func(d jobDoc) bool { return d.Control.Paused && !d.Control.PauseTill.IsZero() }) {
		var err error
		if now, err = mongoutil.ServerTime(ctx, coll.Database()); err != nil {
			return nil, wrapErr(ctx, "read the server's time for the pauses in", coll.Name(), err)
		}
	}
	out := make([]Record, len(docs))
	for i, d := range docs {
		out[i] = d.record(now)
	}
	return out, nil
}

// LoadHistory reads the last limit runs of job from coll (the runs
// collection, DefaultRunsCollection unless WithRunsCollection), newest
// first, from the primary whatever coll's read preference. limit <= 0
// reads all of them. A record it cannot read (a field of the wrong type,
// or no firing time) is skipped and returned in bad (lock.BadDocument), and
// counts towards limit; the error is the read's.
func LoadHistory(ctx context.Context, coll *mongo.Collection, job string, limit int) (runs []Run, bad []lock.BadDocument, err error) {
	if err := checkColl("load history", ctx, coll, "runs"); err != nil {
		return nil, nil, err
	}
	opts := options.Find().SetSort(bson.D{{Key: fieldJob, Value: 1}, {Key: fieldScheduled, Value: -1}, {Key: fieldAttempt, Value: -1}})
	if limit > 0 {
		opts.SetLimit(int64(limit))
	}
	cur, err := mongoutil.Primary(coll).Find(ctx, bson.D{{Key: fieldJob, Value: job}}, opts)
	if err != nil {
		return nil, nil, wrapErr(ctx, "read history of", job, err)
	}
	bad, err = readEach(ctx, cur, coll.Name(), func(raw bson.Raw) (string, error) {
		r, field, err := decodeRun(raw, job)
		if err == nil {
			runs = append(runs, r)
		}
		return field, err
	})
	if err != nil {
		return nil, nil, wrapErr(ctx, "read history of", job, err)
	}
	return runs, bad, nil
}

// record is what d says of its job at now, the server's time.
func (d *jobDoc) record(now time.Time) Record {
	r := Record{Name: d.ID, Spec: d.Spec, SpecSince: d.SpecSince, LastClaimed: d.Last, ClaimedBy: d.By, LastRun: d.Run.run(d.ID),
		Pending: d.Pending, Removed: d.Control.Removed, FailedInARow: d.Control.Fails, Specs: d.Regs.specs()}
	if d.Last.Equal(time.Unix(0, 0)) {
		r.LastClaimed = time.Time{} // registered, never claimed
	}
	if d.Control.pausedAt(now) {
		r.Paused = &Pause{Note: d.Control.PauseNote, Until: d.Control.PauseTill, At: d.Control.PausedAt, By: d.Control.PausedBy}
	}
	if !d.Control.Trigger.IsZero() {
		r.Triggered = d.Control.Trigger
	}
	return r
}

// EnsureIndexes is Scheduler.EnsureIndexes for a runs collection, for
// migrations: an index to read a job's runs by firing and, if retention > 0,
// a TTL index on the end time that keeps runs for retention (a plain index,
// and a call to warn, where TTL indexes are not implemented).
func EnsureIndexes(ctx context.Context, runs *mongo.Collection, retention time.Duration, warn func(string)) error {
	if err := checkColl("ensure indexes", ctx, runs, "runs"); err != nil {
		return err
	}
	ixs := []mongoutil.Index{{Name: HistoryIndexName, Keys: bson.D{{Key: fieldJob, Value: 1}, {Key: fieldScheduled, Value: -1}}}}
	if retention > 0 {
		ixs = append(ixs, mongoutil.Index{Name: HistoryTTLIndexName, Keys: bson.D{{Key: fieldEnd, Value: 1}},
			TTL: true, TTLSeconds: int64(lock.TTLSeconds(retention))})
	}
	err := mongoutil.EnsureIndexes(ctx, runs, func(msg string) { warn(msg + "; run history is kept until PurgeHistory") }, ixs...)
	if err != nil {
		return mongoutil.WrapErr(ctx, fmt.Sprintf("ensure indexes of %q", runs.Name()), err)
	}
	return nil
}

func (s *mongoStore) ensureIndexes(ctx context.Context, retention time.Duration, warn func(string)) error {
	return EnsureIndexes(ctx, s.runs, retention, warn)
}

// purge deletes history that ended more than retention ago by the server's
// clock.
func (s *mongoStore) purge(ctx context.Context, retention time.Duration) (int, error) {
	now, err := mongoutil.ServerTime(ctx, s.runs.Database())
	if err != nil {
		return 0, wrapErr(ctx, "read server clock for", s.runs.Name(), err)
	}
	res, err := s.runs.DeleteMany(ctx, bson.D{{Key: fieldEnd, Value: bson.D{{Key: "$lt", Value: now.Add(-retention)}}}})
	if err != nil {
		return 0, wrapErr(ctx, "purge", s.runs.Name(), err)
	}
	return int(res.DeletedCount), nil
}

// wrapErr adds what was done to which id (mongoutil.WrapErr).
func wrapErr(ctx context.Context, op, id string, err error) error {
	return mongoutil.WrapErr(ctx, fmt.Sprintf("%s %q", op, id), err)
}
