package wirefault_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/wirefault"
)

// upstream is the address of the shared test server.
func upstream(tb testing.TB) string {
	tb.Helper()
	return options.Client().ApplyURI(mongotest.URI()).Hosts[0]
}

func TestCloseClosesConnections(t *testing.T) {
	t.Parallel()
	mongotest.NewClient(t) // holds the server for this test
	p, err := wirefault.Start(upstream(t))
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().SetHosts([]string{p.Addr()}).SetDirect(true).
		SetServerSelectionTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	if err := client.Ping(ctx(t), nil); err != nil {
		t.Fatal(err)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.Ping(ctx(t), nil); err == nil {
		t.Error("ping through a closed proxy succeeded")
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestStartRejectsNilRule(t *testing.T) {
	t.Parallel()
	if _, err := wirefault.Start("127.0.0.1:1", nil); err == nil {
		t.Error("Start accepted a nil rule")
	}
}

// ExampleStart plays a mongos whose clock is an hour ahead of the server.
func ExampleStart() {
	upstream := options.Client().ApplyURI(mongotest.URI()).Hosts[0]
	p, err := wirefault.Start(upstream, wirefault.Mongos(), wirefault.ClockOffset(time.Hour))
	if err != nil {
		panic(err)
	}
	defer p.Close()
	client, err := mongo.Connect(options.Client().SetHosts([]string{p.Addr()}).SetDirect(true))
	if err != nil {
		panic(err)
	}
	defer client.Disconnect(context.Background())

	var hello struct {
		Msg       string    `bson:"msg"`
		LocalTime time.Time `bson:"localTime"`
	}
	err = client.Database("admin").RunCommand(context.Background(), bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
	if err != nil {
		panic(err)
	}
	fmt.Println(hello.Msg, hello.LocalTime.After(time.Now().Add(59*time.Minute)))
	// Output: isdbgrid true
}
