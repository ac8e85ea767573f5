package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// maxBatch bounds the requests one command carries: a batch of claims for
// a thousand jobs is one command, but a command stays well under the
// server's message size.
const maxBatch = 1000

// batcher groups concurrent requests with the same key into one command,
// as a database groups commits: a request waits only while a command for
// its key is in flight, and then goes in the next one with every request
// that came meanwhile. An idle batcher adds no delay, and jobs that fire
// together (every "@every 1s" job at each second) share their commands.
//
// Commands run on the goroutines of the requests: the request at the head
// of the queue sends the next command and hands the queue on to the next
// head when it returns. There is no goroutine to stop.
type batcher[K comparable, Req, Res any] struct {
	// do sends one command for reqs and returns a result per request, in
	// order, or an error for them all.
	do func(ctx context.Context, key K, reqs []Req) ([]Res, error)
	// timeout bounds each command. A command does not inherit the
	// deadline of the request that sends it, which has waited longest and
	// has the least time left, nor end with it: only cancellation (the
	// scheduler stopping) of that request's context cancels the command.
	timeout time.Duration

	mu sync.Mutex
	// queues holds a queue for each key with a command in flight or a head
	// about to send one, and only those.
	queues map[K]*batchQueue[Req, Res]
}

type batchQueue[Req, Res any] struct {
	pending []*batchCall[Req, Res]
}

type batchCall[Req, Res any] struct {
	req     Req
	res     Res
	err     error
	done    chan struct{} // closed when res and err are set
	lead    chan struct{} // closed when this request is to send the next command
	leading bool          // lead is closed; guarded by batcher.mu
}

func newBatcher[K comparable, Req, Res any](timeout time.Duration, do func(context.Context, K, []Req) ([]Res, error)) *batcher[K, Req, Res] {
	return &batcher[K, Req, Res]{do: do, timeout: timeout, queues: make(map[K]*batchQueue[Req, Res])}
}

// submit sends req with the others of key and returns its result. If ctx
// ends while req waits for a command, it is withdrawn and ctx's error
// returned; once in a command, submit waits for that command, whose time
// do bounds.
func (b *batcher[K, Req, Res]) submit(ctx context.Context, key K, req Req) (Res, error) {
	c := &batchCall[Req, Res]{req: req, done: make(chan struct{}), lead: make(chan struct{})}
	b.mu.Lock()
	q := b.queues[key]
	if q == nil { // idle: c sends the next command now
		q = &batchQueue[Req, Res]{}
		b.queues[key] = q
		c.leading = true
		close(c.lead)
	}
	q.pending = append(q.pending, c)
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

// send sends the pending requests of q (up to maxBatch) in one command and
// hands q to the next head, if any.
func (b *batcher[K, Req, Res]) send(ctx context.Context, key K, q *batchQueue[Req, Res]) {
	b.mu.Lock()
	calls := q.pending[:min(len(q.pending), maxBatch)]
	q.pending = slices.Clone(q.pending[len(calls):])
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

	b.mu.Lock()
	defer b.mu.Unlock()
	if len(q.pending) == 0 {
		delete(b.queues, key)
		return
	}
	next := q.pending[0]
	next.leading = true
	close(next.lead)
}
