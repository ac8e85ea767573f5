package mongotest

import (
	"context"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Fault breaks the network between one client and the server. Other clients
// are not affected. Its methods are safe for concurrent use.
type Fault struct {
	tb    testing.TB
	addr  string
	mu    sync.Mutex
	proxy *toxiproxy.Proxy
	state faultState
}

type faultState int

const (
	healthy faultState = iota
	cut
	silenced
)

// silenceToxics drop every byte in each direction and never close.
var silenceToxics = []string{
	`{"name":"silence_up","type":"timeout","stream":"upstream","toxicity":1,"attributes":{"timeout":0}}`,
	`{"name":"silence_down","type":"timeout","stream":"downstream","toxicity":1,"attributes":{"timeout":0}}`,
}

// NewProxiedClient returns a client (as NewClient) that reaches the server
// through its own toxiproxy, and the Fault that controls it. With MONGODB_URI
// the proxy forwards to the primary (or the first host) and the client uses a
// direct connection. opts override the defaults (but not the host). Everything
// stops at cleanup.
func NewProxiedClient(tb testing.TB, opts ...*options.ClientOptions) (*mongo.Client, *Fault) {
	tb.Helper()
	e := current(tb)
	share(tb)

	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	p := toxiproxy.NewProxy(server, "mongotest", "127.0.0.1:0", upstream(tb, e))
	if err := p.Start(); err != nil {
		tb.Fatalf("mongotest: start toxiproxy: %v", err)
	}
	f := &Fault{tb: tb, addr: p.Listen, proxy: p}
	tb.Cleanup(p.Stop) // last: after the client is gone

	opts = append([]*options.ClientOptions{baseOptions(tb, e.uri)}, opts...)
	opts = append(opts, options.Client().SetHosts([]string{f.addr}).SetDirect(true))
	client := connect(tb, opts...)
	tb.Cleanup(f.Restore) // first: so the client disconnects cleanly
	return client, f
}

// upstream is the address the fault proxy forwards to.
func upstream(tb testing.TB, e *environment) string {
	tb.Helper()
	if e.embedded != nil {
		return e.embedded.Addr()
	}
	o := baseOptions(tb, e.uri)
	c, err := mongo.Connect(o)
	if err != nil {
		tb.Fatalf("mongotest: connect: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultServerSelectionTimeout)
	defer cancel()
	defer c.Disconnect(ctx)
	var hello struct {
		Primary string `bson:"primary"`
	}
	if err := c.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello); err != nil {
		tb.Fatalf("mongotest: hello: %v", err)
	}
	if hello.Primary != "" {
		return hello.Primary
	}
	host := o.Hosts[0]
	if !strings.Contains(host, ":") {
		host += ":27017"
	}
	return host
}

// Addr returns the address the client connects to.
func (f *Fault) Addr() string { return f.addr }

// Cut closes the client's connections and refuses new ones until Restore. An
// operation on an open connection fails at once with a network error; after
// that the driver marks the server unknown, so operations (and the driver's
// retries) wait in server selection until their context or the server
// selection timeout ends.
func (f *Fault) Cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.state {
	case cut:
		return
	case silenced:
		f.proxy.Stop()
		f.proxy.Toxics.ResetToxics(context.Background())
	default:
		f.proxy.Stop()
	}
	f.state = cut
}

// Silence keeps connections open but lets no byte through in either
// direction until Restore, so operations hang until their context expires.
func (f *Fault) Silence() {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.state {
	case silenced:
		return
	case cut:
		f.start()
	}
	for _, t := range silenceToxics {
		if _, err := f.proxy.Toxics.AddToxicJson(strings.NewReader(t)); err != nil {
			f.tb.Errorf("mongotest: add toxic: %v", err)
		}
	}
	f.state = silenced
}

// Restore ends a Cut or Silence. Connections silenced mid-message are
// unusable, so they are closed; the driver opens new ones.
func (f *Fault) Restore() {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.state {
	case healthy:
		return
	case silenced:
		f.proxy.Stop()
		f.proxy.Toxics.ResetToxics(context.Background())
	}
	f.start()
	f.state = healthy
}

// start listens again on the same address.
func (f *Fault) start() {
	if err := f.proxy.Start(); err != nil {
		// Errorf, not Fatalf: Fault methods may run on any goroutine.
		f.tb.Errorf("mongotest: restart toxiproxy on %s: %v", f.addr, err)
	}
}
