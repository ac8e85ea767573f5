package devserver_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.uber.org/goleak"

	"github.com/mongolock/mongolock/devserver"
	"github.com/mongolock/mongolock/lock"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			code = 1
			println(err.Error())
		}
	}
	os.Exit(code)
}

// TestForTest: a user's integration test takes a lock on the server and
// keeps its data until the server stops.
func TestForTest(t *testing.T) {
	uri := devserver.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, err := mongo.Connect(options.Client().ApplyURI(uri))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	l, err := lock.New(client.Database("app"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := l.AcquireLocks(ctx, "k", "x")
	if err != nil || len(a.Granted) != 1 {
		t.Fatalf("acquire: %+v %v", a, err)
	}
	if a, err := l.AcquireLocks(ctx, "other", "x"); err != nil || len(a.Refused) != 1 {
		t.Fatalf("contender: %+v %v, want refused", a, err)
	}
}

// TestStartKeepsData: a server started again on the same directory has the
// data of the last one.
func TestStartKeepsData(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	put := func(write bool) int64 {
		s, err := devserver.Start(ctx, dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.Dir() != dir {
			t.Fatalf("dir %q, want %q", s.Dir(), dir)
		}
		client, err := mongo.Connect(options.Client().ApplyURI(s.URI()))
		if err != nil {
			t.Fatal(err)
		}
		defer client.Disconnect(context.Background())
		c := client.Database("app").Collection("c")
		if write {
			if _, err := c.InsertOne(ctx, bson.D{{Key: "_id", Value: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		n, err := c.CountDocuments(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := put(true); n != 1 {
		t.Fatalf("%d documents after the insert", n)
	}
	if n := put(false); n != 1 {
		t.Fatalf("%d documents after a restart on the same directory, want 1", n)
	}
}

// TestOneServerPerDir: a second server on a directory in use is refused
// with ErrDirInUse; a bad address is refused before anything starts.
func TestOneServerPerDir(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := devserver.Start(ctx, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := devserver.Start(ctx, dir, nil); !errors.Is(err, devserver.ErrDirInUse) {
		t.Errorf("second server on %s: %v, want ErrDirInUse", dir, err)
	}
	for _, bad := range []devserver.Option{nil, devserver.WithAddr("27027"), devserver.WithAddr("127.0.0.1:")} {
		if _, err := devserver.Start(ctx, t.TempDir(), nil, bad); err == nil || !strings.HasPrefix(err.Error(), "devserver: ") {
			t.Errorf("bad option: %v", err)
		}
	}
}
