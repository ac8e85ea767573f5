package scheduler

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// One spec per job, cluster-wide. A job document holds the spec the
// cluster follows (spec), a hash of it and the job's name (sh), and when
// it became the job's (ssat, the server's time). Each Scheduler writes its
// spec there when it registers the job, at its Start: the newest
// registration wins. Claims, and the takeovers of claims, match the hash,
// so an instance whose spec was superseded claims nothing of the job: it
// does not fire it, and reports it (lock.JobSpecSuperseded), until an
// instance registers its spec again. So that the job never stops while an
// instance that registers it is up, a superseded instance registers its
// spec again (takesBack) when no live instance is known to register the
// spec followed: the newest live registration wins.
const (
	fieldHash      = "sh"
	fieldSpecSince = "ssat"
)

// fieldRegs holds, in a job document, the specs instances registered the
// job with: {regs: {<regKey of the spec>: {spec, by, cl, at}}}, one entry a
// spec, with the keeper (by) and the Scheduler (cl, its ClaimantID) that
// last registered it, and when that Scheduler first registered the job (at,
// by its clock). Each Scheduler writes its entry with the document's
// registration (register), so a spec whose last registrant has stopped
// stays until the document does: the presence leases of the registrants
// tell which specs are live.
const fieldRegs = "regs"

type regsDoc map[string]regDoc

type regDoc struct {
	Spec     string    `bson:"spec"`
	By       string    `bson:"by"`
	Claimant string    `bson:"cl,omitempty"`
	Since    time.Time `bson:"at,omitempty"`
}

// regKey is the key of spec's entry in fieldRegs.
func regKey(spec string) string {
	sum := sha256.Sum256([]byte(spec))
	return hex.EncodeToString(sum[:8])
}

// regReq is a job as a Scheduler registers it: its name and canonical
// spec, who registers it, and since when (its first registration of the
// job, by its clock, kept when it registers the job again).
type regReq struct {
	claimReq
	reg regDoc
}

// RegisteredSpecIn returns spec as a Scheduler in time zone loc
// (WithLocation) registers it, and as Record.Spec shows it: with a
// CRON_TZ= prefix naming loc (its IANA name: see WithLocation) unless spec
// has one, or does not depend on the zone (@every), or loc is UTC. A
// program compares it with Record.Spec to tell whether the cluster follows
// its spec. A zone WithLocation refuses is named as loc.String() names it:
// no Scheduler registers that.
func RegisteredSpecIn(spec string, loc *time.Location) string {
	if z, err := zoneOf(loc); err == nil {
		loc = z
	}
	return canonicalSpec(spec, loc)
}

// canonicalSpec is spec as the cluster compares it: with the time zone the
// Scheduler reads it in (WithLocation) unless it names its own or does not
// depend on one (@every), so that instances reading one spec in different
// zones do not count as agreeing.
func canonicalSpec(spec string, loc *time.Location) string {
	switch {
	case strings.HasPrefix(spec, "TZ="), strings.HasPrefix(spec, "CRON_TZ="),
		strings.HasPrefix(spec, "@every "), loc == nil, loc == time.UTC:
		return spec
	}
	return "CRON_TZ=" + loc.String() + " " + spec
}

// specHash identifies spec as job's: the hash of both, so that one
// condition on a batch of jobs ({sh: {$in: hashes}}) matches each job's
// own.
func specHash(job, spec string) string {
	sum := sha256.Sum256([]byte(job + "\x00" + spec))
	return hex.EncodeToString(sum[:8])
}

// registration is the update that records r's registration of its spec:
// none without a keeper.
func registration(r regReq) bson.D {
	if r.reg.By == "" {
		return nil
	}
	return bson.D{{Key: "$set", Value: bson.D{{Key: fieldRegs + "." + regKey(r.spec), Value: r.reg}}}}
}

func (r regsDoc) specs() []RegisteredSpec {
	if len(r) == 0 {
		return nil
	}
	out := make([]RegisteredSpec, 0, len(r))
	for _, d := range r {
		out = append(out, RegisteredSpec{Spec: d.Spec, By: d.By})
	}
	slices.SortFunc(out, func(a, b RegisteredSpec) int { return cmp.Compare(a.Spec, b.Spec) })
	return out
}

// takesBack reports whether a superseded instance, whose registration of
// a job is mine, registers its spec again over the spec the cluster
// follows, whose last registrant is active (known: the document names
// one), live or not. It does when no live instance is known to register
// the spec followed, or when its own registration is the newer one (a
// registrant that took a job back keeps its first registration's time):
// so the newest registration among the live instances wins, and two live
// instances with different specs agree on which, poll after poll.
// Registrations are ordered by the registrants' clocks, then by claimant.
func takesBack(mine, active regDoc, known, live bool) bool {
	switch {
	case !known || active.Claimant == "" || !live:
		return true
	case !mine.Since.Equal(active.Since):
		return mine.Since.After(active.Since)
	}
	return mine.Claimant > active.Claimant
}

// Orphaned reports whether no instance that is up is known to register
// the job of r, up telling whether a keeper is up (holds a presence lease,
// such as `mongolock locks` lists under "@instance/"): neither the last
// registrant of any of its specs (Specs) nor its last claimant. Such a job
// fires nothing until an instance registers it (a job removed from the
// program, or every instance of it down). While an instance that
// registers it is up, the job is not orphaned for longer than a poll or
// two (see "One spec per job" in the package doc). A removed job, or one
// with no registered spec recorded, is not judged: false.
func (r Record) Orphaned(up func(keeper string) bool) bool {
	if r.Removed || len(r.Specs) == 0 {
		return false
	}
	for _, sp := range r.Specs {
		if up(sp.By) {
			return false
		}
	}
	if i := strings.LastIndex(r.ClaimedBy, "/"); i > 0 && up(r.ClaimedBy[:i]) {
		return false // a claimant's id is its keeper's, a slash and a suffix
	}
	return true
}
