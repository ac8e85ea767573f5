package ui

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/baddoc"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/redact"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Limits of the readings.
const (
	recentTerms    = 500 // terms read for the elections
	termsShown     = 10  // terms shown per election
	recentProblems = 500 // failed or skipped runs read for the overview
	problemWindow  = time.Hour
	attentionJobs  = 50
	lockTermsShown = 50
)

// lockKind says what a lock is for.
type lockKind string

const (
	kindJob      lockKind = "job"
	kindPresence lockKind = "instance"
	kindElection lockKind = "election"
	// kindCandidate is the candidacy of a runner with a priority
	// (runner.WithPriority).
	kindCandidate lockKind = "candidate"
	// kindSlot is a slot of a semaphore (lock.SlotID: "<name>#<k>").
	kindSlot  lockKind = "slot"
	kindOther lockKind = "other"
)

// lockView is a held (or lapsed) lock as the pages show it.
type lockView struct {
	lock.Holder
	Kind         lockKind
	Name         string        // the job's name, the instance's keeper id, or the lock id
	TTL          time.Duration // of the lease that wrote it
	ExpiresIn    time.Duration // by the server's clock at the reading; negative once lapsed
	SinceRenewal time.Duration
	// Late: the holder missed a renewal (more than a third of the TTL
	// since the last one: sessions renew every third by default).
	Late bool
	// Value is the holder's value (lock.Holder.Value) as shown: redacted
	// text, or hex after "0x"; "" for none.
	Value string
	// Semaphore and Slot name the semaphore and the slot number of a
	// kindSlot lock.
	Semaphore string
	Slot      int
}

// Bounds of the lock readings.
const (
	// snapshotLocks is how many held locks the shared lock snapshot reads
	// (the first by id), and a page of the locks page scans.
	snapshotLocks = 1000
	// snapshotPresence is how many instances' presence locks it reads.
	snapshotPresence = 1000
)

// locksReading is one reading of the lock collection: the first
// snapshotLocks held locks by id, and the presence locks of the instances.
type locksReading struct {
	Locks []lockView
	// More: there are held locks after the last of Locks.
	More     bool
	Presence []lockView
	ReadAt   time.Time // the server's time of the reading (lower bound)
}

// lookup returns the lock id as the reading holds it; known: the reading
// says whether it is held (it holds it, or it holds every lock).
func (lr locksReading) lookup(id string) (v lockView, found, known bool) {
	for _, ls := range [][]lockView{lr.Locks, lr.Presence} {
		if i := slices.IndexFunc(ls, func(l lockView) bool { return l.LockID == id }); i >= 0 {
			return ls[i], true, true
		}
	}
	return lockView{}, false, !lr.More || (len(lr.Locks) > 0 && id < lr.Locks[len(lr.Locks)-1].LockID)
}

func (h *Handler) readLocks(ctx context.Context) (locksReading, error) {
	return get(ctx, h.rd, "locks", func(ctx context.Context) (locksReading, error) {
		elections, _ := h.readElectionIDs(ctx) // without the term log, none are known
		out := locksReading{}
		var err error
		if out.Locks, out.More, err = h.loadLocks(ctx, "", "", snapshotLocks, elections, &out.ReadAt); err != nil {
			return locksReading{}, err
		}
		presence := h.cfg.lockPrefix + "@instance/"
		if !out.More { // the snapshot holds every lock: the presence ones too
			for _, l := range out.Locks {
				if strings.HasPrefix(l.LockID, presence) {
					out.Presence = append(out.Presence, l)
				}
			}
		} else if out.Presence, _, err = h.loadLocks(ctx, presence, "", snapshotPresence, elections, &out.ReadAt); err != nil {
			return locksReading{}, err
		}
		if out.ReadAt.IsZero() {
			if lo, _, ok := h.locker.ServerTime(); ok {
				out.ReadAt = lo
			} else if out.ReadAt, err = mongoutil.ServerTime(ctx, h.db); err != nil {
				return locksReading{}, err
			}
		}
		return out, nil
	})
}

// readHolder reads lock id's document, held or not (zero Holder: none),
// an item reading.
func (h *Handler) readHolder(ctx context.Context, id string) (lock.Holder, error) {
	return getItem(ctx, h.rd, "holder:"+id, func(ctx context.Context) (lock.Holder, error) {
		hd, err := h.locker.Holder(ctx, id)
		if errors.Is(err, lock.ErrNotHeld) {
			err = nil
		}
		return hd, err
	})
}

// loadLocks reads a page of at most n held locks (LocksPage), and whether
// more follow; readAt is moved to the latest reading time of the locks.
func (h *Handler) loadLocks(ctx context.Context, prefix, after string, n int, elections map[string]bool, readAt *time.Time) ([]lockView, bool, error) {
	hs, err := h.locker.LocksPage(ctx, prefix, after, n+1)
	if err != nil {
		return nil, false, err
	}
	more := len(hs) > n
	hs = hs[:min(len(hs), n)]
	out := make([]lockView, 0, len(hs))
	for _, hd := range hs {
		if hd.ReadAt.After(*readAt) {
			*readAt = hd.ReadAt
		}
		out = append(out, h.viewLock(hd, elections))
	}
	return out, more, nil
}

// viewLock is hd as the pages show it, its ids redacted: the one place a
// lock read is redacted (elections holds redacted ids too).
func (h *Handler) viewLock(hd lock.Holder, elections map[string]bool) lockView {
	hd = redact.Holder(hd, h.cfg.redact)
	v := lockView{Holder: hd, Kind: kindOther, Name: hd.LockID, Value: redact.ValueText(hd.Value)}
	presence := h.cfg.lockPrefix + "@instance/" + h.cfg.jobs + "/"
	switch {
	case strings.HasPrefix(hd.LockID, presence):
		v.Kind, v.Name = kindPresence, strings.TrimPrefix(hd.LockID, presence)
	case strings.HasPrefix(hd.LockID, h.cfg.lockPrefix+"@instance/"):
		v.Kind, v.Name = kindPresence, strings.TrimPrefix(hd.LockID, h.cfg.lockPrefix+"@instance/")
	case strings.HasPrefix(hd.LockID, h.cfg.lockPrefix):
		v.Kind, v.Name = kindJob, strings.TrimPrefix(hd.LockID, h.cfg.lockPrefix)
	case elections[hd.LockID]:
		v.Kind = kindElection
	default:
		if c, ok := runner.ParseCandidate(hd); ok {
			v.Kind, v.Name = kindCandidate, fmt.Sprintf("%s (priority %d) for %s", c.KeeperID, c.Priority, c.LockID)
		} else if name, k, ok := lock.ParseSlotID(hd.LockID); ok {
			v.Kind, v.Semaphore, v.Slot = kindSlot, name, k
			v.Name = fmt.Sprintf("slot #%d of semaphore %s", k, name)
		}
	}
	v.TTL = hd.ExpiresAt.Sub(hd.RenewedAt)
	if !hd.ReadAt.IsZero() {
		v.ExpiresIn = hd.ExpiresAt.Sub(hd.ReadAt)
		v.SinceRenewal = max(hd.ReadAt.Sub(hd.RenewedAt), 0)
		v.Late = v.TTL > 0 && v.SinceRenewal > v.TTL/3+v.TTL/10
	}
	return v
}

// now is the server's time, as the Locker estimates it (its last reading,
// moved forward on the local monotonic clock).
func (h *Handler) now(ctx context.Context) (time.Time, error) {
	if lo, _, ok := h.locker.ServerTime(); ok {
		return lo, nil
	}
	lr, err := h.readLocks(ctx)
	return lr.ReadAt, err
}

// readTerms reads the recent terms of every election.
func (h *Handler) readTerms(ctx context.Context) ([]runner.Term, error) {
	return get(ctx, h.rd, "terms", func(ctx context.Context) ([]runner.Term, error) {
		return h.loadTerms(ctx, "", recentTerms)
	})
}

// The one place each kind of document is read from the database: each
// returns its text (ids, errors, notes, reasons) redacted.

// loadTerms reads the terms of lockID (all locks: ""), newest first.
func (h *Handler) loadTerms(ctx context.Context, lockID string, n int) ([]runner.Term, error) {
	ts, bad, err := runner.LoadTerms(ctx, h.db.Collection(h.cfg.terms), lockID, n)
	h.reportBad(bad...)
	for i, t := range ts {
		ts[i] = redact.Term(t, h.cfg.redact)
	}
	return ts, err
}

// loadRecordsPage reads a page of the jobs' records.
func (h *Handler) loadRecordsPage(ctx context.Context, q scheduler.RecordsQuery) (scheduler.RecordsPage, error) {
	p, err := scheduler.LoadRecordsPage(ctx, h.db.Collection(h.cfg.jobs), q)
	h.reportBad(p.Bad...)
	for i, r := range p.Records {
		p.Records[i] = redact.Record(r, h.cfg.redact)
	}
	p.Next = h.cfg.redact(p.Next) // a job's name, in the Next link
	return p, err
}

// loadHistoryPage reads a page of a job's run history.
func (h *Handler) loadHistoryPage(ctx context.Context, q scheduler.HistoryQuery) (scheduler.HistoryPage, error) {
	p, err := scheduler.LoadHistoryPage(ctx, h.db.Collection(h.cfg.runs), q)
	h.reportBad(p.Bad...)
	for i, r := range p.Runs {
		p.Runs[i] = redact.Run(r, h.cfg.redact)
	}
	return p, err
}

// loadActions reads the actions filter selects, newest first.
func (h *Handler) loadActions(ctx context.Context, what string, filter bson.D, sort bson.D, limit int64) ([]actionRecord, error) {
	cur, err := mongoutil.Primary(h.db.Collection(h.cfg.actions)).Find(ctx, filter, options.Find().SetSort(sort).SetLimit(limit))
	if err != nil {
		return nil, mongoutil.WrapErr(ctx, "read the actions on "+what, err)
	}
	out, bad, err := baddoc.All[actionRecord](ctx, cur, h.cfg.actions, nil)
	if err != nil {
		return nil, mongoutil.WrapErr(ctx, "read the actions on "+what, err)
	}
	h.reportBad(bad...)
	for i, a := range out {
		a.Job, a.Lock, a.By, a.Note = h.cfg.redact(a.Job), h.cfg.redact(a.Lock), h.cfg.redact(a.By), h.cfg.redact(a.Note)
		out[i] = a
	}
	return out, nil
}

// readElectionIDs is the set of locks the term log knows as elections.
func (h *Handler) readElectionIDs(ctx context.Context) (map[string]bool, error) {
	terms, err := h.readTerms(ctx)
	out := make(map[string]bool)
	for _, t := range terms {
		out[t.LockID] = true
	}
	return out, err
}

// termRow is a term as the pages show it.
type termRow struct {
	runner.Term
	Took time.Duration // zero while open or if its end is not recorded
	Open bool          // the lock holds this term now
	// GapBefore is the failover gap from the previous term (GapKnown).
	GapBefore time.Duration
	GapKnown  bool
	Killed    bool // no end recorded and not open: the leader died or was cut off
	// LastHeld is, for a term killed, the last instant it held the lock as
	// the next term's leader read it (that term's start less its gap).
	LastHeld time.Time
	// SoFar is how long an open term has lasted.
	SoFar time.Duration
}

// electionView is an election: its current leader and recent terms.
type electionView struct {
	LockID string
	Leader *lockView
	Terms  []termRow
	// More: older terms were read than shown.
	More bool
}

func (h *Handler) elections(ctx context.Context) ([]electionView, error) {
	terms, err := h.readTerms(ctx)
	if err != nil {
		return nil, err
	}
	lr, err := h.readLocks(ctx)
	if err != nil {
		return nil, err
	}
	held := make(map[string]*lockView)
	for _, ls := range [][]lockView{lr.Locks, lr.Presence} {
		for i := range ls {
			held[ls[i].LockID] = &ls[i]
		}
	}
	elections := make(map[string]bool)
	for _, t := range terms {
		elections[t.LockID] = true
	}
	for id := range elections {
		// An election past the lock snapshot: read its lock by id, within
		// the item readings of the refresh (past them, its leader is not
		// known).
		if _, _, known := lr.lookup(id); known || held[id] != nil {
			continue
		}
		if hd, err := h.readHolder(ctx, id); err == nil && hd.KeeperID != "" {
			v := h.viewLock(hd, elections)
			held[id] = &v
		}
	}
	byLock := make(map[string][]runner.Term)
	var ids []string
	for _, t := range terms {
		if _, ok := byLock[t.LockID]; !ok {
			ids = append(ids, t.LockID)
		}
		byLock[t.LockID] = append(byLock[t.LockID], t)
	}
	// Elections whose lock is held but whose terms are not in the log are
	// not known as such: they show on the locks page.
	slices.Sort(ids)
	out := make([]electionView, 0, len(ids))
	for _, id := range ids {
		ts := byLock[id]
		slices.SortFunc(ts, func(a, b runner.Term) int { return cmp.Compare(b.Fence, a.Fence) })
		ev := electionView{LockID: id, Terms: termRows(ts, held[id])}
		if l := held[id]; l != nil && !l.Expired {
			ev.Leader = l
		}
		if len(ev.Terms) > termsShown {
			ev.Terms, ev.More = ev.Terms[:termsShown], true
		}
		out = append(out, ev)
	}
	return out, nil
}

// termRows turns terms of one lock, newest first, into rows with the gaps
// between them; cur is the lock's holder now, if any.
func termRows(ts []runner.Term, cur *lockView) []termRow {
	rows := make([]termRow, len(ts))
	for i, t := range ts {
		r := termRow{Term: t}
		r.Open = cur != nil && !cur.Expired && cur.Fence == t.Fence
		if !t.End.IsZero() && !t.Start.IsZero() {
			r.Took = t.End.Sub(t.Start)
		}
		r.Killed = t.End.IsZero() && !r.Open
		if r.Open && cur != nil && !cur.ReadAt.IsZero() && !t.Start.IsZero() {
			r.SoFar = cur.ReadAt.Sub(t.Start)
		}
		if r.Killed && i > 0 && ts[i-1].Gap > 0 && !ts[i-1].Start.IsZero() {
			r.LastHeld = ts[i-1].Start.Add(-ts[i-1].Gap)
			if !t.Start.IsZero() && r.LastHeld.After(t.Start) {
				r.Took = r.LastHeld.Sub(t.Start)
			}
		}
		if i+1 < len(ts) {
			prev := ts[i+1]
			switch {
			case t.Gap > 0:
				r.GapBefore, r.GapKnown = t.Gap, true
			case !prev.End.IsZero() && !t.Start.IsZero():
				r.GapBefore, r.GapKnown = max(t.Start.Sub(prev.End), 0), true
			}
		} else if t.Gap > 0 {
			r.GapBefore, r.GapKnown = t.Gap, true
		}
		rows[i] = r
	}
	return rows
}

// instanceView is a scheduler instance, by its presence lease.
type instanceView struct {
	Keeper   string
	LastSeen time.Time
	Up       bool
	Lock     lockView
}

// problem counts a job's failed and missed firings in the problem window.
type problem struct {
	Job                     string
	Failed, Missed, Skipped int
	Last                    time.Time
	LastReason              string
}

// overview is the data of the overview page.
type overview struct {
	Instances []instanceView
	Elections []electionView
	Attention []jobRow
	Problems  []problem
	Expiring  []lockView
	Window    time.Duration
	Now       time.Time
	TermsErr  string // the term log could not be read
	// MoreLocks: Expiring is of the first Scanned held locks (and the
	// presence locks): more are held.
	MoreLocks bool
	Scanned   int
}

func (h *Handler) overview(ctx context.Context) (overview, error) {
	lr, err := h.readLocks(ctx)
	if err != nil {
		return overview{}, err
	}
	ov := overview{Window: problemWindow, Now: lr.ReadAt, MoreLocks: lr.More, Scanned: len(lr.Locks)}
	for _, l := range lr.Presence {
		ov.Instances = append(ov.Instances, instanceView{Keeper: l.Name, LastSeen: l.RenewedAt, Up: !l.Expired, Lock: l})
	}
	seen := make(map[string]bool)
	for _, ls := range [][]lockView{lr.Locks, lr.Presence} {
		for _, l := range ls {
			if (l.Expired || l.Late) && !seen[l.LockID] {
				seen[l.LockID] = true
				ov.Expiring = append(ov.Expiring, l)
			}
		}
	}
	slices.SortFunc(ov.Expiring, func(a, b lockView) int { return strings.Compare(a.LockID, b.LockID) })
	if ov.Elections, err = h.elections(ctx); err != nil {
		ov.TermsErr = h.cfg.redact(err.Error())
	}
	page, err := get(ctx, h.rd, "jobs:attention", func(ctx context.Context) (scheduler.RecordsPage, error) {
		return h.loadRecordsPage(ctx, scheduler.RecordsQuery{Attention: true, Limit: attentionJobs})
	})
	if err != nil {
		return overview{}, err
	}
	for _, r := range page.Records {
		ov.Attention = append(ov.Attention, h.jobRow(r, lr))
	}
	if ov.Problems, err = h.problems(ctx, lr.ReadAt.Add(-problemWindow)); err != nil {
		return overview{}, err
	}
	return ov, nil
}

// problemDoc is what problems reads of a run record.
type problemDoc struct {
	Job       string    `bson:"job"`
	Outcome   string    `bson:"outcome"`
	Reason    string    `bson:"reason"`
	Scheduled time.Time `bson:"scheduled"`
	Count     int       `bson:"count"`
}

// problems reads the runs that failed or were not run since then (on the
// history's end index), and counts them by job, most recent first.
func (h *Handler) problems(ctx context.Context, since time.Time) ([]problem, error) {
	return get(ctx, h.rd, "problems", func(ctx context.Context) ([]problem, error) {
		cur, err := mongoutil.Primary(h.db.Collection(h.cfg.runs)).Find(ctx,
			bson.D{{Key: "end", Value: bson.D{{Key: "$gte", Value: since}}},
				{Key: "outcome", Value: bson.D{{Key: "$in", Value: bson.A{string(scheduler.OutcomeFailed), string(scheduler.OutcomeSkipped), string(scheduler.OutcomeSpent)}}}}},
			options.Find().SetSort(bson.D{{Key: "end", Value: -1}}).SetLimit(recentProblems).
				SetProjection(bson.D{{Key: "job", Value: 1}, {Key: "outcome", Value: 1}, {Key: "reason", Value: 1}, {Key: "scheduled", Value: 1}, {Key: "count", Value: 1}}))
		if err != nil {
			return nil, mongoutil.WrapErr(ctx, "read recent problems", err)
		}
		docs, bad, err := baddoc.All[problemDoc](ctx, cur, h.cfg.runs, nil)
		if err != nil {
			return nil, mongoutil.WrapErr(ctx, "read recent problems", err)
		}
		h.reportBad(bad...)
		byJob := make(map[string]*problem)
		var out []*problem
		for _, d := range docs {
			if strings.HasPrefix(d.Reason, scheduler.ReasonPaused) || strings.HasPrefix(d.Reason, scheduler.ReasonRemoved) {
				continue // on purpose
			}
			if d.Outcome == string(scheduler.OutcomeSpent) {
				d.Reason = spentLabel
			}
			d.Job, d.Reason = h.cfg.redact(d.Job), h.cfg.redact(d.Reason)
			p := byJob[d.Job]
			if p == nil {
				p = &problem{Job: d.Job, Last: d.Scheduled, LastReason: d.Reason}
				byJob[d.Job] = p
				out = append(out, p)
			}
			n := max(d.Count, 1)
			switch {
			case d.Outcome == string(scheduler.OutcomeFailed), d.Outcome == string(scheduler.OutcomeSpent):
				p.Failed++
			case isMisfire(d.Reason):
				p.Missed += n
			default:
				p.Skipped += n
			}
		}
		res := make([]problem, len(out))
		for i, p := range out {
			res[i] = *p
		}
		return res, nil
	})
}

// isMisfire reports whether reason is a misfire's, or one of the reasons
// older versions recorded for what is now a misfire.
func isMisfire(reason string) bool {
	return strings.HasPrefix(reason, scheduler.ReasonMisfired) || strings.HasPrefix(reason, "missed") ||
		strings.HasPrefix(reason, "catch-up window passed")
}

// jobRow is a job as the jobs table shows it.
type jobRow struct {
	scheduler.Record
	Registered string // the spec the program registers, if it differs
	TZ         string // the time zone its spec is read in
	// Specs are the specs instances registered it with, and whether their
	// last registrant is up; Disagree: instances up registered different
	// specs.
	Specs    []specView
	Disagree bool
	// Orphaned: no instance up is known to register the job, so none fires
	// it (scheduler.Record.Orphaned).
	Orphaned bool
	Next     []time.Time
	NextWhy  string // why there is no next firing
	Last     *runView
	Presence bool // the last claimant's presence lease is held
}

func (h *Handler) jobRow(r scheduler.Record, lr locksReading) jobRow {
	row := jobRow{Record: r}
	if spec, ok := h.cfg.registered[r.Name]; ok && r.Spec != "" && scheduler.RegisteredSpecIn(spec, h.cfg.location) != r.Spec {
		row.Registered = spec
	}
	row.Next, row.NextWhy = h.nextFirings(r, lr.ReadAt, 3)
	row.TZ = specZone(r.Spec, h.cfg.location)
	present := presentKeepers(lr)
	live := 0
	for _, sp := range r.Specs {
		v := specView{RegisteredSpec: sp, Up: present[sp.By]}
		if v.Up {
			live++
		}
		row.Specs = append(row.Specs, v)
	}
	row.Disagree = live > 1
	row.Orphaned = r.Orphaned(func(k string) bool { return present[k] })
	if r.LastRun != nil {
		v := h.viewRun(*r.LastRun, present, nil)
		row.Last = &v
	}
	return row
}

// specView is a spec instances registered a job with.
type specView struct {
	scheduler.RegisteredSpec
	Up bool // its last registrant holds its presence lease
}

// presentKeepers is the set of keepers whose presence lease is held.
func presentKeepers(lr locksReading) map[string]bool {
	out := make(map[string]bool)
	for _, l := range lr.Presence {
		if !l.Expired {
			out[l.KeeperID] = true
		}
	}
	return out
}

// nextFirings returns the next n firings of r that will run, after now and
// after its last claim, from the spec of its last claim: none while it is
// removed or paused without an end, none before a pause's end.
func (h *Handler) nextFirings(r scheduler.Record, now time.Time, n int) ([]time.Time, string) {
	switch {
	case r.Removed:
		return nil, "removed"
	case r.Paused != nil && r.Paused.Until.IsZero():
		return nil, "paused"
	case r.Spec == "":
		return nil, "no spec recorded"
	}
	after := now
	if r.LastClaimed.After(after) {
		after = r.LastClaimed
	}
	if p := r.Paused; p != nil && !p.Until.Before(after) {
		after = p.Until.Add(-time.Nanosecond)
	}
	var out []time.Time
	for range n {
		next, err := scheduler.NextFiring(r.Spec, after, h.cfg.location)
		switch {
		case err != nil:
			return out, "invalid spec"
		case next.IsZero():
			if len(out) == 0 {
				return nil, "no firing in five years"
			}
			return out, ""
		}
		out = append(out, next)
		after = next
	}
	return out, ""
}

// jobsPage is the data of the jobs page.
type jobsPage struct {
	Rows      []jobRow
	Next      string // the after of the next page; for the page, its query
	Prefix    string
	Attention bool
	After     string
	ReadAt    time.Time // of the lock reading its states are judged by
}

func (h *Handler) jobs(ctx context.Context, q scheduler.RecordsQuery) (jobsPage, error) {
	lr, err := h.readLocks(ctx)
	if err != nil {
		return jobsPage{}, err
	}
	key := fmt.Sprintf("jobs:%q:%q:%v:%d", q.Prefix, q.After, q.Attention, q.Limit)
	page, err := getItem(ctx, h.rd, key, func(ctx context.Context) (scheduler.RecordsPage, error) {
		return h.loadRecordsPage(ctx, q)
	})
	if err != nil {
		return jobsPage{}, err
	}
	out := jobsPage{Next: page.Next, Prefix: q.Prefix, Attention: q.Attention, After: q.After, ReadAt: lr.ReadAt}
	for _, r := range page.Records {
		out.Rows = append(out.Rows, h.jobRow(r, lr))
	}
	return out, nil
}

// errUnknownJob is a job page of a job with no document.
var errUnknownJob = errors.New("unknown job")

// errBadJob is a job page of a job whose document cannot be read: the
// page shows its history all the same, and says so.
var errBadJob = errors.New("job document cannot be read")

// readJob reads one job's record.
func (h *Handler) readJob(ctx context.Context, name string) (scheduler.Record, error) {
	return getItem(ctx, h.rd, "job:"+name, func(ctx context.Context) (scheduler.Record, error) {
		recs, bad, err := scheduler.LoadRecords(ctx, h.db.Collection(h.cfg.jobs), name)
		h.reportBad(bad...)
		switch {
		case err != nil:
			return scheduler.Record{}, err
		case len(recs) == 0 && len(bad) > 0:
			// Its document is there, but cannot be read: say so, not "unknown".
			return scheduler.Record{Name: name}, fmt.Errorf("%w: %s", errBadJob, h.cfg.redact(bad[0].String()))
		case len(recs) == 0:
			return scheduler.Record{}, fmt.Errorf("%w %q: no document in %s.%s", errUnknownJob, name, h.db.Name(), h.cfg.jobs)
		}
		return redact.Record(recs[0], h.cfg.redact), nil
	})
}

// readMigrations reads the status of the migrations.
func (h *Handler) readMigrations(ctx context.Context) ([]migrations.Entry, error) {
	return get(ctx, h.rd, "migrations", func(ctx context.Context) ([]migrations.Entry, error) {
		es, err := h.migrator.Status(ctx)
		for i, e := range es {
			if e.Bad != nil {
				h.reportBad(*e.Bad)
			}
			es[i] = redact.Migration(e, h.cfg.redact)
		}
		return es, err
	})
}

// lockTerms reads the terms of one lock: from the run history for a job's
// lock (each run is a term), from the term log otherwise.
func (h *Handler) lockTerms(ctx context.Context, v lockView) ([]termRow, error) {
	if v.Kind == kindJob {
		runs, err := getItem(ctx, h.rd, "lockruns:"+v.Name, func(ctx context.Context) ([]scheduler.Run, error) {
			p, err := h.loadHistoryPage(ctx, scheduler.HistoryQuery{Job: v.Name,
				Outcomes: []scheduler.Outcome{scheduler.OutcomeSucceeded, scheduler.OutcomeFailed}, Limit: lockTermsShown})
			return p.Runs, err
		})
		if err != nil {
			return nil, err
		}
		rows := make([]termRow, 0, len(runs))
		for _, r := range runs {
			if r.Start.IsZero() {
				continue
			}
			rows = append(rows, termRow{Term: runner.Term{LockID: v.LockID, KeeperID: r.Keeper, Fence: r.Fence, Start: r.Start, End: r.End,
				Reason: string(r.Outcome)}, Took: r.End.Sub(r.Start)})
		}
		return rows, nil
	}
	terms, err := getItem(ctx, h.rd, "lockterms:"+v.LockID, func(ctx context.Context) ([]runner.Term, error) {
		return h.loadTerms(ctx, v.LockID, lockTermsShown)
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(terms, func(a, b runner.Term) int { return cmp.Compare(b.Fence, a.Fence) })
	return termRows(terms, &v), nil
}

// actionRecord is an action taken from the dashboard, as recorded.
type actionRecord struct {
	ID     bson.ObjectID `bson:"_id"`
	Kind   ActionKind    `bson:"kind"`
	Job    string        `bson:"job,omitempty"`
	Lock   string        `bson:"lock,omitempty"`
	By     string        `bson:"by"`
	Note   string        `bson:"note,omitempty"`
	Until  time.Time     `bson:"until,omitempty"`
	At     time.Time     `bson:"at"`
	Result string        `bson:"result,omitempty"`
}

// lockActions reads the last actions on lock id from the dashboard (force
// releases), newest first.
func (h *Handler) lockActions(ctx context.Context, id string) ([]actionRecord, error) {
	return getItem(ctx, h.rd, "lockactions:"+id, func(ctx context.Context) ([]actionRecord, error) {
		return h.loadActions(ctx, id, bson.D{{Key: "lock", Value: id}}, bson.D{{Key: "lock", Value: 1}, {Key: "at", Value: -1}}, lockTermsShown)
	})
}

// jobActions reads the actions on job from the dashboard, at or after
// from (zero: any) and before to (zero: any), newest first.
func (h *Handler) jobActions(ctx context.Context, job string, from, to time.Time, limit int) ([]actionRecord, error) {
	key := fmt.Sprintf("actions:%q:%d:%d:%d", job, from.UnixNano(), to.UnixNano(), limit)
	return getItem(ctx, h.rd, key, func(ctx context.Context) ([]actionRecord, error) {
		filter := bson.D{{Key: "job", Value: job}}
		at := bson.D{}
		if !from.IsZero() {
			at = append(at, bson.E{Key: "$gte", Value: from})
		}
		if !to.IsZero() {
			at = append(at, bson.E{Key: "$lt", Value: to})
		}
		if len(at) > 0 {
			filter = append(filter, bson.E{Key: "at", Value: at})
		}
		return h.loadActions(ctx, job, filter, bson.D{{Key: "job", Value: 1}, {Key: "at", Value: -1}}, int64(limit))
	})
}

// isNotFound reports a read of a collection that does not exist, which
// servers may answer with an error rather than nothing.
func isNotFound(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(mongoutil.CodeNamespaceNotFound)
}

// specZone is the time zone spec is read in: its CRON_TZ= or TZ= prefix,
// else loc (the scheduler's WithLocation).
func specZone(spec string, loc *time.Location) string {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(spec, p); ok {
			zone, _, _ := strings.Cut(rest, " ")
			return zone
		}
	}
	return loc.String()
}
