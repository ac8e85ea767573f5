package scheduler

import (
	"context"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// MaxConcurrentWrites bounds the commands of one Scheduler that are not
// batched (the writes that take over, resume, settle one job's
// claim, and the reads that look at one job's lock holder) in flight at
// once. The batched ones (claims, lock acquisitions and releases, starts,
// ends, history) are one command at a time per batch already, up to
// maxInFlight beside stalled ones. A burst of
// thousands of firings ending at once (a Stop) would otherwise take every
// connection of the driver's pool, and the Session's keep-alive, which
// every lease rests on, would wait for one.
const MaxConcurrentWrites = 16

// limiter is a counting semaphore whose waiters give up with their
// context.
type limiter chan struct{}

func (l limiter) acquire(ctx context.Context) error {
	select {
	case l <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l limiter) release() { <-l }

// limitedStore is a store whose unbatched calls wait for a slot of the
// Scheduler's limiter.
type limitedStore struct {
	store
	slots limiter
}

func limited(ctx context.Context, l limiter, fn func() error) error {
	if err := l.acquire(ctx); err != nil {
		return err
	}
	defer l.release()
	return fn()
}

func (s limitedStore) takeOver(ctx context.Context, jobs []string, from, keeper string) (ws []*work, err error) {
	err = limited(ctx, s.slots, func() error { ws, err = s.store.takeOver(ctx, jobs, from, keeper); return err })
	return ws, err
}

func (s limitedStore) resume(ctx context.Context, job, keeper string, cid bson.ObjectID) (w *work, err error) {
	err = limited(ctx, s.slots, func() error { w, err = s.store.resume(ctx, job, keeper, cid); return err })
	return w, err
}

func (s limitedStore) claimTrigger(ctx context.Context, job string, t time.Time, keeper string) (w *work, err error) {
	err = limited(ctx, s.slots, func() error { w, err = s.store.claimTrigger(ctx, job, t, keeper); return err })
	return w, err
}

func (s limitedStore) settle(ctx context.Context, w *work) (ok bool, err error) {
	err = limited(ctx, s.slots, func() error { ok, err = s.store.settle(ctx, w); return err })
	return ok, err
}

func (s limitedStore) pauseAfter(ctx context.Context, job string, n int) (ok bool, err error) {
	err = limited(ctx, s.slots, func() error { ok, err = s.store.pauseAfter(ctx, job, n); return err })
	return ok, err
}
