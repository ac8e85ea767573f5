package embedded_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/dirlock"
	"github.com/mongolock/mongolock/internal/embedded"
)

func start(t *testing.T, dir string) *embedded.Server {
	t.Helper()
	s, err := embedded.Start(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func connect(t *testing.T, s *embedded.Server) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().ApplyURI(s.URI()).
		SetServerSelectionTimeout(2 * time.Second).SetConnectTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = c.Disconnect(ctx)
	})
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestStopRestartClose(t *testing.T) {
	s := start(t, "")
	uri := s.URI()
	coll := connect(t, s).Database("db").Collection("c")
	if _, err := coll.InsertOne(ctxFor(t, 5*time.Second), bson.D{{Key: "_id", Value: 1}}); err != nil {
		t.Fatal(err)
	}

	s.Stop()
	s.Stop() // idempotent
	if err := coll.FindOne(ctxFor(t, time.Second), bson.D{}).Err(); err == nil {
		t.Fatal("find while stopped succeeded")
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(); err != nil { // running: nothing to do
		t.Fatal(err)
	}
	if s.URI() != uri {
		t.Fatalf("URI changed across restart: %s -> %s", uri, s.URI())
	}
	// The same client reconnects by itself and finds the data.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := coll.CountDocuments(ctxFor(t, time.Second), bson.D{})
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart: count = %d, %v", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	dir := s.Dir()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory %s left after Close: %v", dir, err)
	}
	if err := s.Restart(); !errors.Is(err, embedded.ErrClosed) {
		t.Errorf("Restart after Close = %v, want ErrClosed", err)
	}
	s.Stop() // no-op after Close
}

func TestGivenDirIsKept(t *testing.T) {
	dir := t.TempDir()
	s := start(t, dir)
	if s.Dir() != dir {
		t.Fatalf("Dir = %s, want %s", s.Dir(), dir)
	}
	if _, err := connect(t, s).Database("kept").Collection("c").InsertOne(ctxFor(t, 5*time.Second), bson.D{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("data directory after Close: %v entries, %v", len(entries), err)
	}
}

func TestStartCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := embedded.Start(ctx, "", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Start with a cancelled context = %v", err)
	}
}

// TestSingleDocumentAtomicity: concurrent findAndModify $inc on one document
// from many clients loses no increment. FerretDB alone reads then writes by
// _id, so without the serializer increments get lost.
func TestSingleDocumentAtomicity(t *testing.T) {
	const clients, ops = 10, 10
	s := start(t, "")
	coll := connect(t, s).Database("db").Collection("c")
	if _, err := coll.InsertOne(ctxFor(t, 5*time.Second), bson.D{{Key: "_id", Value: 1}, {Key: "n", Value: 0}}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients*ops)
	for range clients {
		c := connect(t, s).Database("db").Collection("c")
		wg.Go(func() {
			for range ops {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				errs <- c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: 1}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}}).Err()
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	var got struct{ N int }
	if err := coll.FindOne(ctxFor(t, 5*time.Second), bson.D{{Key: "_id", Value: 1}}).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if got.N != clients*ops {
		t.Errorf("n = %d, want %d", got.N, clients*ops)
	}
}

func ExampleStart() {
	ctx := context.Background()
	srv, err := embedded.Start(ctx, "", nil) // a temporary directory
	if err != nil {
		panic(err)
	}
	defer srv.Close() // stops FerretDB and removes the directory

	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		panic(err)
	}
	defer client.Disconnect(ctx)
	coll := client.Database("example").Collection("c")
	if _, err := coll.InsertOne(ctx, bson.D{{Key: "hello", Value: "world"}}); err != nil {
		panic(err)
	}
	n, err := coll.CountDocuments(ctx, bson.D{})
	fmt.Println(n, err)
	// Output: 1 <nil>
}

// TestConcurrentStarts: Servers may start at the same time in one process
// (the race detector checks FerretDB's package state).
func TestConcurrentStarts(t *testing.T) {
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			s, err := embedded.Start(context.Background(), "", nil)
			if err != nil {
				t.Error(err)
				return
			}
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

// TestOneServerPerDir: a second server on a directory in use is refused,
// told which server holds it; once that one closed, the directory is free.
func TestOneServerPerDir(t *testing.T) {
	dir := t.TempDir()
	first, err := embedded.Start(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = embedded.Start(context.Background(), dir, nil)
	if !errors.Is(err, dirlock.ErrLocked) || !strings.Contains(err.Error(), first.URI()) {
		t.Errorf("second server on %s: %v", dir, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	start(t, dir)
}

// TestStartAt: a server listens where it is told, again after a restart of
// the process; an address in use is refused.
func TestStartAt(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	dir := t.TempDir()
	for range 2 {
		s, err := embedded.StartAt(context.Background(), addr, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if s.URI() != "mongodb://"+addr+"/" {
			t.Errorf("URI %s, want the address %s", s.URI(), addr)
		}
		_, err = embedded.StartAt(context.Background(), addr, t.TempDir(), nil)
		if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("second server on %s: %v", addr, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
