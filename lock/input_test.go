package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"

	"github.com/mongolock/mongolock/lock"
)

func TestBadInputIsRejectedAndWritesNothing(t *testing.T) {
	t.Parallel()
	ls, db := newLockers(t, 1)
	l := ls[0]
	ctx := testCtx(t, 30*time.Second)
	bad := map[string]string{
		"empty":        "",
		"too long":     strings.Repeat("x", lock.MaxIDLength+1),
		"invalid utf8": "a\xffb",
		"nul byte":     "a\x00b",
	}
	ops := map[string]func(lockID, keeperID string) error{
		"AcquireLock":  func(id, kid string) error { _, _, err := acquireOne(ctx, l, id, kid); return err },
		"ReleaseLock":  func(id, kid string) error { return releaseOne(ctx, l, id, kid) },
		"Renew":        func(id, kid string) error { _, err := l.Renew(ctx, kid, "ok", id); return err },
		"Holder":       func(id, _ string) error { _, err := l.Holder(ctx, id); return err },
		"ForceRelease": func(id, _ string) error { return l.ForceRelease(ctx, id) },
		"ReleaseLocks": func(id, kid string) error { _, err := l.ReleaseLocks(ctx, kid, "ok", id); return err },
		"AcquireLocks": func(id, kid string) error { _, err := l.AcquireLocks(ctx, kid, "ok", id); return err },
	}
	for opName, op := range ops {
		for what, v := range bad {
			for _, arg := range []string{"lockID", "keeperID"} {
				id, kid := "ok", "ok"
				if arg == "lockID" {
					id = v
				} else {
					kid = v
				}
				if (opName == "Holder" || opName == "ForceRelease") && arg == "keeperID" {
					continue
				}
				err := op(id, kid)
				if !errors.Is(err, lock.ErrInvalidArgument) {
					t.Errorf("%s with %s %s: %v, want ErrInvalidArgument", opName, what, arg, err)
					continue
				}
				if !strings.Contains(err.Error(), arg) {
					t.Errorf("%s with %s %s: %q does not name the argument", opName, what, arg, err)
				}
			}
		}
	}
	// MaxIDLength itself is fine.
	if _, ok, err := acquireOne(ctx, l, strings.Repeat("é", lock.MaxIDLength/2), "k"); !ok || err != nil {
		t.Fatalf("id of exactly %d bytes: ok=%v err=%v", lock.MaxIDLength, ok, err)
	}
	n, err := db.Collection(lock.DefaultCollection).CountDocuments(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$type", Value: "string"}}}, {Key: "kid", Value: bson.D{{Key: "$ne", Value: "k"}}}})
	if err != nil || n != 0 {
		t.Fatalf("bad input wrote %d documents (%v)", n, err)
	}
}

func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	_, db := newLockers(t, 0)
	cases := []struct {
		name string
		opt  lock.Option
		want string
	}{
		{"zero ttl", lock.WithTTL(0), "WithTTL"},
		{"tiny ttl", lock.WithTTL(time.Millisecond), "WithTTL"},
		{"huge ttl", lock.WithTTL(100 * 365 * 24 * time.Hour), "WithTTL"},
		{"empty collection", lock.WithCollection(""), "WithCollection"},
		{"dollar collection", lock.WithCollection("a$b"), "WithCollection"},
		{"system collection", lock.WithCollection("system.x"), "WithCollection"},
		{"nil write concern", lock.WithWriteConcern(nil), "WithWriteConcern"},
		{"unacknowledged", lock.WithWriteConcern(writeconcern.Unacknowledged()), "WithWriteConcern"},
		{"nil clock", lock.WithClock(nil), "WithClock"},
		{"zero refresh", lock.WithClockRefresh(0), "WithClockRefresh"},
		{"nil option", nil, "nil option"},
	}
	for _, c := range cases {
		_, err := lock.New(db, c.opt)
		if !errors.Is(err, lock.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidOption naming %s", c.name, err, c.want)
		}
	}
	if _, err := lock.New(nil); !errors.Is(err, lock.ErrInvalidOption) {
		t.Errorf("nil database: %v", err)
	}
}

func TestCancelledContextSurfaces(t *testing.T) {
	t.Parallel()
	ls, _ := newLockers(t, 1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, ok, err := acquireOne(ctx, ls[0], "c", "k")
	if ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with cancelled context: ok=%v err=%v, want context.Canceled", ok, err)
	}
}
