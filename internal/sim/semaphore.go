package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/mongolock/mongolock/lock"
)

// The semaphore the simulated application takes: semSlots slots, fewer
// than most worlds' instances, so that holders wait for one another.
const (
	semName  = "pool"
	semSlots = 2
)

// semLoop takes a slot of the semaphore with DoSemaphore now and then,
// and works under it. Its draws come from a source of its own, so that
// the other loops' draws are those they were before it.
func (in *instance) semLoop() {
	w := in.sim.world
	h := fnv.New64a()
	fmt.Fprint(h, "semaphore", in.slot, in.life.Name)
	rng := rand.New(rand.NewPCG(w.Seed, h.Sum64()))
	for {
		if err := lock.Sleep(in.ctx, in.clock, randDur(rng, 0, w.TTL/2)); err != nil {
			return
		}
		steps := 1 + rng.IntN(3)
		d := randDur(rng, 0, w.TTL)
		_ = in.session.DoSemaphore(in.ctx, semName, semSlots, func(ctx context.Context) error {
			return in.work(ctx, "semaphore", steps, d)
		})
	}
}

// checkSemaphore checks that at no instant more than semSlots terms of
// the semaphore's slots acted, by true time, which the server's clock
// keeps: a term acts from its first action to its last, ends included
// (as checkExclusion judges two terms of one lock). Each slot's own
// exclusion and fences are checkExclusion's, as for any lock. It returns
// too how many terms it judged, and how many of them began with every
// slot acting (so the limit was tested).
func checkSemaphore(acts []Act) (violations []string, judged, full int) {
	type span struct {
		id          string
		fence       uint64
		instance    string
		first, last time.Duration
	}
	terms := map[string]*span{}
	var order []string
	for _, a := range acts {
		name, _, ok := lock.ParseSlotID(a.LockID)
		if !ok || name != semName {
			continue
		}
		key := fmt.Sprintf("%s/%d", a.LockID, a.Fence)
		t := terms[key]
		if t == nil {
			t = &span{id: a.LockID, fence: a.Fence, instance: a.Instance, first: a.At}
			terms[key] = t
			order = append(order, key)
		}
		t.last = a.At
	}
	spans := make([]*span, 0, len(order))
	for _, k := range order {
		spans = append(spans, terms[k])
	}
	sort.SliceStable(spans, func(i, k int) bool { return spans[i].first < spans[k].first })
	// Sweep by first action: the terms still acting when one begins.
	var acting []*span
	for _, t := range spans {
		kept := acting[:0]
		for _, o := range acting {
			if o.last >= t.first {
				kept = append(kept, o)
			}
		}
		acting = append(kept, t)
		if len(acting) == semSlots {
			full++
		}
		if len(acting) > semSlots {
			var who []string
			for _, o := range acting {
				who = append(who, fmt.Sprintf("%s on %s (fence %d, %.3fs to %.3fs)", o.instance, o.id, o.fence, o.first.Seconds(), o.last.Seconds()))
			}
			return []string{fmt.Sprintf("semaphore: %q has %d slots, and %d terms acted at %.3fs: %s",
				semName, semSlots, len(acting), t.first.Seconds(), strings.Join(who, "; "))}, len(spans), full
		}
	}
	return nil, len(spans), full
}
