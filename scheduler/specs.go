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
// instance registers its spec again.
const (
	fieldHash      = "sh"
	fieldSpecSince = "ssat"
)

// fieldRegs holds, in a job document, the specs instances registered the
// job with: {regs: {<hash of the spec>: {spec, by}}}, one entry a spec,
// with the keeper that last registered it. Each Scheduler writes its entry
// once, with the document's registration (register), so a spec whose last
// registrant has stopped stays until the document does: the dashboard
// judges by the keepers' presence which specs are live.
const fieldRegs = "regs"

type regsDoc map[string]regDoc

type regDoc struct {
	Spec string `bson:"spec"`
	By   string `bson:"by"`
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

// registration is the update that records keeper's registration of spec:
// none without a keeper.
func registration(spec, keeper string) bson.D {
	if keeper == "" {
		return nil
	}
	sum := sha256.Sum256([]byte(spec))
	key := fieldRegs + "." + hex.EncodeToString(sum[:8])
	return bson.D{{Key: "$set", Value: bson.D{{Key: key, Value: bson.D{{Key: "spec", Value: spec}, {Key: "by", Value: keeper}}}}}}
}

func (r regsDoc) specs() []RegisteredSpec {
	if len(r) == 0 {
		return nil
	}
	out := make([]RegisteredSpec, 0, len(r))
	for _, d := range r {
		out = append(out, RegisteredSpec(d))
	}
	slices.SortFunc(out, func(a, b RegisteredSpec) int { return cmp.Compare(a.Spec, b.Spec) })
	return out
}
