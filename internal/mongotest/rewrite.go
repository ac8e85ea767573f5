package mongotest

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/wirefault"
)

// NewRewrittenClient returns a client (as NewClient) that reaches the server
// through its own wirefault.Proxy, so rules can make the server look like
// another deployment (see package internal/wirefault). The client uses a
// direct connection; with MONGODB_URI the proxy forwards to the primary (or
// the first host), and the connection must not use TLS, which would hide
// commands from the rules. opts override the defaults (but not the host).
// Everything stops at cleanup.
func NewRewrittenClient(tb testing.TB, rules []wirefault.Rule, opts ...*options.ClientOptions) *mongo.Client {
	tb.Helper()
	e := current(tb)
	share(tb)

	p, err := wirefault.Start(upstream(tb, e), rules...)
	if err != nil {
		tb.Fatalf("mongotest: %v", err)
	}
	tb.Cleanup(func() { _ = p.Close() }) // after the client disconnects

	opts = append([]*options.ClientOptions{baseOptions(tb, e.uri)}, opts...)
	opts = append(opts, options.Client().SetHosts([]string{p.Addr()}).SetDirect(true))
	return connect(tb, opts...)
}
