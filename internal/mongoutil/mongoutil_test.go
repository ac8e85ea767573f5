package mongoutil_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
)

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }

func TestServerTimeAndIndexes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client, counter := mongotest.CountingClient(t)
	db := mongotest.Database(t, client, mongotest.NewDatabase(t).Name())
	now, err := mongoutil.ServerTime(ctx, db)
	if err != nil || now.IsZero() {
		t.Fatalf("server time: %v %v", now, err)
	}
	coll := db.Collection("c")
	if ix, err := mongoutil.Indexes(ctx, coll); err != nil || len(ix) != 0 {
		t.Fatalf("indexes of a missing collection: %v %v", ix, err)
	}
	var warned int
	ixs := []mongoutil.Index{
		{Name: "t_ttl", Keys: bson.D{{Key: "t", Value: 1}}, TTL: true, TTLSeconds: 10},
		{Name: "k", Keys: bson.D{{Key: "k", Value: 1}}},
	}
	for i := range 2 { // idempotent
		counter.Reset()
		if err := mongoutil.EnsureIndexes(ctx, coll, func(string) { warned++ }, ixs...); err != nil {
			t.Fatal(err)
		}
		// The indexes are listed once; the second time nothing is created.
		if n := counter.Count("listIndexes"); n != 1 {
			t.Errorf("call %d listed the indexes %d times", i+1, n)
		}
		if i == 1 && counter.Total() != 1 {
			t.Errorf("second call: %d commands, want only the listing", counter.Total())
		}
	}
	ix, err := mongoutil.Indexes(ctx, coll)
	if err != nil || len(ix) != 3 {
		t.Fatalf("indexes: %v %v, want _id_, t_ttl, k", ix, err)
	}
	ttl := ix["t_ttl"].ExpireAfterSeconds
	if mongotest.Backend() == mongotest.BackendFerretDB {
		if ttl != nil || warned != 1 {
			t.Fatalf("FerretDB: ttl %v, warnings %d; want a plain index and one warning", ttl, warned)
		}
		return
	}
	if ttl == nil || *ttl != 10 || warned != 0 {
		t.Fatalf("ttl %v, warnings %d", ttl, warned)
	}
	ixs[0].TTLSeconds = 5
	err = mongoutil.EnsureIndexes(ctx, coll, nil, ixs...)
	if ix, _ := mongoutil.Indexes(ctx, coll); err != nil || *ix["t_ttl"].ExpireAfterSeconds != 5 {
		t.Fatalf("collMod to 5: err %v", err)
	}
}

func TestValidCollectionName(t *testing.T) {
	for name, want := range map[string]bool{
		"locks": true, "a.b": true, "": false, "a$b": false, "a\x00b": false, "system.users": false,
	} {
		if got := mongoutil.ValidCollectionName(name); got != want {
			t.Errorf("ValidCollectionName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestWrapErrSurfacesTheContext(t *testing.T) {
	cause := errors.New("i/o timeout")
	if err := mongoutil.WrapErr(context.Background(), "acquire \"x\"", cause); !errors.Is(err, cause) ||
		err.Error() != `acquire "x": i/o timeout` {
		t.Errorf("live context: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := mongoutil.WrapErr(ctx, "acquire", cause); !errors.Is(err, cause) || !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v, want both the cause and context.Canceled", err)
	}
}

func TestOnlyDuplicateKeys(t *testing.T) {
	dup := mongo.BulkWriteError{WriteError: mongo.WriteError{Index: 1, Code: 11000}}
	other := mongo.BulkWriteError{WriteError: mongo.WriteError{Index: 2, Code: 2}}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not a bulk write error", errors.New("boom"), false},
		{"duplicate keys", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{dup, dup}}, true},
		{"wrapped", fmt.Errorf("x: %w", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{dup}}), true},
		{"another write error too", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{dup, other}}, false},
		{"write concern error", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{dup}, WriteConcernError: &mongo.WriteConcernError{Code: 64}}, false},
		{"no write errors", mongo.BulkWriteException{}, false},
	} {
		if got := mongoutil.OnlyDuplicateKeys(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
