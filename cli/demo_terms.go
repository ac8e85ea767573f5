package cli

import (
	"context"
	"time"

	"github.com/mongolock/mongolock/runner"
)

// closeTermLog writes what the term log still holds, within timeout even
// after ctx ended: the last term's end comes with the instance's shutdown.
func closeTermLog(ctx context.Context, terms *runner.TermLog, timeout time.Duration) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	_ = terms.Close(cctx)
}
