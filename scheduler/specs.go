package scheduler

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
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
