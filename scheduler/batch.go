package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// maxBatch bounds the requests one command carries: a batch of claims for
// a thousand jobs is one command, but a command stays well under the
// server's message size.
const maxBatch = 1000

// maxInFlight bounds the commands of one key in flight at once: one
// normally, more only beside commands that stalled.
const maxInFlight = 4

// minStall is the least a command is out before it counts as stalled:
// Linux's least TCP retransmission timeout (TCP_RTO_MIN).
const minStall = 200 * time.Millisecond

// batcher groups concurrent requests with the same key into one command,
// as a database groups commits: a request waits only while a command for
// its key is in flight, and then goes in the next one with every request
// that came meanwhile. An idle batcher adds no delay, and jobs that fire
// together (every "@every 1s" job at each second) share their commands.
//
// A command that stalls does not hold the others back: once every command
// of a key in flight has been out longer than replies usually take
// (stall), the next goes beside them, up to maxInFlight. Otherwise one
// slow reply (a lost packet, one slow document) would delay every job's
// claims, locks or records on this instance by up to the op timeout,
// which the job whose command it was has in its misfire threshold but the
// others do not.
//
// Commands run on the goroutines of the requests: the request at the head
// of the queue sends the next command and hands the queue on to the next
// head when it returns or stalls. There is no goroutine to stop.
type batcher[K comparable, Req, Res any] struct {
	// do sends one command for reqs and returns a result per request, in
	// order, or an error for them all.
	do func(ctx context.Context, key K, reqs []Req) ([]Res, error)
	// timeout bounds each command. A command does not inherit the
	// deadline of the request that sends it, which has waited longest and
	// has the least time left, nor end with it: only cancellation (the
	// scheduler stopping) of that request's context cancels the command.
	timeout time.Duration
	clock   clockwork.Clock // times the stalls

	mu sync.Mutex
	// queues holds a queue for each key with a command in flight or a head
	// about to send one, and only those.
	queues map[K]*batchQueue[Req, Res]
	// replies are how long the last commands answered took, a ring
	// filled in turn; sampled counts every reply ever added.
	replies [replySamples]time.Duration
	sampled int
}

type batchQueue[Req, Res any] struct {
	pending  []*batchCall[Req, Res]
	inFlight int  // commands sent and not returned
	fresh    int  // of those, the ones not stalled yet
	heading  bool // pending[0] is the head, about to send a command
}

type batchCall[Req, Res any] struct {
	req     Req
	res     Res
	err     error
	done    chan struct{} // closed when res and err are set
	lead    chan struct{} // closed when this request is to send the next command
	leading bool          // lead is closed; guarded by batcher.mu
}

func newBatcher[K comparable, Req, Res any](clock clockwork.Clock, timeout time.Duration, do func(context.Context, K, []Req) ([]Res, error)) *batcher[K, Req, Res] {
	return &batcher[K, Req, Res]{do: do, timeout: timeout, clock: clock, queues: make(map[K]*batchQueue[Req, Res])}
}

// submit sends req with the others of key and returns its result. If ctx
// ends while req waits for a command, it is withdrawn and ctx's error
// returned; once in a command, submit waits for that command, whose time
// do bounds.
func (b *batcher[K, Req, Res]) submit(ctx context.Context, key K, req Req) (Res, error) {
	c := &batchCall[Req, Res]{req: req, done: make(chan struct{}), lead: make(chan struct{})}
	b.mu.Lock()
	q := b.queues[key]
	if q == nil {
		q = &batchQueue[Req, Res]{}
		b.queues[key] = q
	}
	q.pending = append(q.pending, c)
	b.handOn(q) // idle, or every command in flight stalled: c sends the next now
	b.mu.Unlock()

	select {
	case <-c.done:
		return c.res, c.err
	case <-c.lead:
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(q.pending, c); i >= 0 && !c.leading {
			q.pending = slices.Delete(q.pending, i, i+1)
			b.mu.Unlock()
			var zero Res
			return zero, ctx.Err()
		}
		b.mu.Unlock()
		// Taken into a command, or made the head: see it through.
		select {
		case <-c.done:
			return c.res, c.err
		case <-c.lead:
		}
	}
	b.send(ctx, key, q)
	<-c.done // c was the head, so in the command just sent
	return c.res, c.err
}

// handOn makes the first pending request of q the head if none is and
// no command of q in flight is fresh. Called with b.mu held.
func (b *batcher[K, Req, Res]) handOn(q *batchQueue[Req, Res]) {
	if q.heading || len(q.pending) == 0 || q.fresh > 0 || q.inFlight >= maxInFlight {
		return
	}
	next := q.pending[0]
	q.heading = true
	next.leading = true
	close(next.lead)
}

// replySamples is how many of the last replies the stall is taken from.
const replySamples = 16

// stall is how long a command is out before the next goes beside it:
// four times the median of the last replies, at least minStall. A
// median, not a mean (TCP's smoothed round trip): the slow replies the
// stall is for must not raise it, or the next slow one would hold the
// others back again; a server whose replies are all slow raises it, so
// that it gets no more commands than it can answer. Called with b.mu
// held.
func (b *batcher[K, Req, Res]) stall() time.Duration {
	n := min(b.sampled, replySamples)
	if n == 0 {
		return minStall
	}
	s := slices.Clone(b.replies[:n])
	slices.Sort(s)
	return max(minStall, 4*s[n/2])
}

// took adds how long a command's reply took to the samples. Called with
// b.mu held.
func (b *batcher[K, Req, Res]) took(d time.Duration) {
	b.replies[b.sampled%replySamples] = d
	b.sampled++
}

// send sends the pending requests of q (up to maxBatch) in one command and
// hands q to the next head, if any, when it returns or stalls.
func (b *batcher[K, Req, Res]) send(ctx context.Context, key K, q *batchQueue[Req, Res]) {
	b.mu.Lock()
	calls := q.pending[:min(len(q.pending), maxBatch)]
	q.pending = slices.Clone(q.pending[len(calls):])
	q.heading = false
	q.inFlight++
	q.fresh++
	stalled := false
	timer := b.clock.AfterFunc(b.stall(), func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if !stalled {
			stalled = true
			q.fresh--
			b.handOn(q)
		}
	})
	b.mu.Unlock()

	reqs := make([]Req, len(calls))
	for i, c := range calls {
		reqs[i] = c.req
	}
	cmdCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.timeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(ctx.Err(), context.Canceled) {
			cancel()
		}
	})
	defer stop()
	began := b.clock.Now()
	res, err := b.do(cmdCtx, key, reqs)
	if err == nil && len(res) != len(reqs) {
		err = fmt.Errorf("batch of %d requests: %d results", len(reqs), len(res))
	}
	for i, c := range calls {
		if err != nil {
			c.err = err
		} else {
			c.res = res[i]
		}
		close(c.done)
	}

	timer.Stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil && cmdCtx.Err() == nil {
		b.took(b.clock.Since(began)) // an answer, not a timeout
	}
	q.inFlight--
	if !stalled {
		stalled = true
		q.fresh--
	}
	if q.inFlight == 0 && !q.heading && len(q.pending) == 0 {
		delete(b.queues, key)
		return
	}
	b.handOn(q)
}
