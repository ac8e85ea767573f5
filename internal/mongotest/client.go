package mongotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Client defaults: short, so a test against a dead server fails in seconds.
const (
	DefaultServerSelectionTimeout = 5 * time.Second
	DefaultConnectTimeout         = 2 * time.Second

	// cleanupTimeout bounds disconnects and drops at cleanup.
	cleanupTimeout = 5 * time.Second
)

// NewClient returns a client with its own connection pool, named after the
// test, disconnected at cleanup. opts override the defaults.
func NewClient(tb testing.TB, opts ...*options.ClientOptions) *mongo.Client {
	tb.Helper()
	e := current(tb)
	share(tb)
	return connect(tb, append([]*options.ClientOptions{baseOptions(tb, e.uri)}, opts...)...)
}

// baseOptions returns the test defaults, overridden by what uri sets.
func baseOptions(tb testing.TB, uri string) *options.ClientOptions {
	tb.Helper()
	o := options.Client().
		SetAppName(appName(tb)).
		SetServerSelectionTimeout(DefaultServerSelectionTimeout).
		SetConnectTimeout(DefaultConnectTimeout).
		ApplyURI(uri)
	// Merging options loses the ApplyURI error, so check it here.
	if err := o.Validate(); err != nil {
		tb.Fatalf("mongotest: bad %s: %v", EnvURI, err)
	}
	return o
}

func connect(tb testing.TB, opts ...*options.ClientOptions) *mongo.Client {
	tb.Helper()
	c, err := mongo.Connect(opts...)
	if err != nil {
		tb.Fatalf("mongotest: connect: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = c.Disconnect(ctx) // may fail after an outage; nothing to do about it
	})
	return c
}

// appName is the test name, cut to the 128 bytes MongoDB allows.
func appName(tb testing.TB) string {
	name := tb.Name()
	if len(name) > 128 {
		name = name[:128]
	}
	return name
}

// NewDatabase returns a database with a fresh name on a new client, dropped at
// cleanup.
func NewDatabase(tb testing.TB) *mongo.Database {
	tb.Helper()
	db := NewClient(tb).Database(databaseName(tb.Name()))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		_ = db.Drop(ctx) // may fail after an outage; the server is temporary anyway
	})
	return db
}

// Database opens the database called name (usually another client's
// NewDatabase) on client, so several clients can share one database.
func Database(tb testing.TB, client *mongo.Client, name string) *mongo.Database {
	tb.Helper()
	if client == nil || name == "" {
		tb.Fatal("mongotest: Database needs a client and a name")
	}
	return client.Database(name)
}

// databaseName derives a unique name from a test name. Both MongoDB and
// FerretDB accept it: at most 63 bytes of [A-Za-z0-9_-].
func databaseName(testName string) string {
	var suffix [4]byte
	_, _ = rand.Read(suffix[:]) // never fails
	tail := "_" + hex.EncodeToString(suffix[:])

	b := []byte(testName)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	head := strings.Trim(string(b), "_")
	if head == "" {
		head = "test"
	}
	if max := 63 - len(tail); len(head) > max {
		head = head[:max]
	}
	return head + tail
}

// IsReplicaSet reports whether client is connected to a replica set member.
func IsReplicaSet(tb testing.TB, client *mongo.Client) bool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultServerSelectionTimeout)
	defer cancel()
	var hello struct {
		SetName string `bson:"setName"`
	}
	err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&hello)
	if err != nil {
		tb.Fatalf("mongotest: hello: %v", err)
	}
	return hello.SetName != ""
}
