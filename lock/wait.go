package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// waitFor is the waiting loop of Mutex.Lock and Semaphore.Lock: attempt
// until one takes the lock or ctx ends, pausing between attempts as the
// Session's Backoff says (pause may end early, when a holder in the
// Session lets go). Failed attempts are retried, the last one's error
// joined to ctx's when ctx ends; ErrAlreadyHeld, ErrSessionClosed and
// ErrInvalidArgument end it at once. what names the call in errors.
func waitFor(ctx context.Context, s *Session, what string,
	attempt func(ctx context.Context, attempt int) (*Lease, bool, error),
	pause func(ctx context.Context, d time.Duration) error,
) (*Lease, error) {
	b := s.Backoff()
	var last error
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return nil, errors.Join(fmt.Errorf("%s: %w", what, err), last)
		}
		lease, ok, err := attempt(ctx, n)
		switch {
		case ok:
			return lease, nil
		case errors.Is(err, ErrAlreadyHeld), errors.Is(err, ErrSessionClosed), errors.Is(err, ErrInvalidArgument):
			return nil, err
		case err != nil && ctx.Err() == nil:
			last = err
		}
		if err := pause(ctx, b.Pause(s.clock.Now(), n)); err != nil {
			if errors.Is(err, ErrSessionClosed) {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			return nil, errors.Join(fmt.Errorf("%s: %w", what, err), last)
		}
	}
}
