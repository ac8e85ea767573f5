package cli

import (
	"context"
	"fmt"
	"net"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// serveUI serves the dashboard of the demo's database (the ui command's,
// read-only) until stop is called, which the demo does before it drops the
// database; it prints the address.
func (d *demo) serveUI(ctx context.Context, db *mongo.Database) (stop func(), err error) {
	var f uiFlags
	_ = f.register(d.a, "demo") // the ui command's defaults
	h, err := d.a.dashboard(db, f, zerolog.Nop())
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", d.f.uiListen)
	if err != nil {
		return nil, usagef("--ui-listen %q: %v", d.f.uiListen, err)
	}
	fmt.Fprintf(d.out, "  dashboard: http://%s/ (open it now: it shows the instances, the leader and every firing live, until the demo ends)\n\n", ln.Addr())
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = serveUntil(sctx, ln, newHTTPServer(h), zerolog.Nop())
	}()
	return func() { cancel(); <-done }, nil
}
