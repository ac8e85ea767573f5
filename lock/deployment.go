package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"

	"github.com/mongolock/mongolock/internal/ctxlock"
	"github.com/mongolock/mongolock/internal/mongoutil"
)

// deployment is what a Locker learns, once, of the server behind its
// collection.
type deployment struct {
	probing *ctxlock.Mutex // held by the call that probes
	mu      sync.Mutex     // guards the fields below
	known   bool
	isMongo bool   // behind mongos (directly or through a load balancer)
	warning string // why mutual exclusion is not guaranteed here; "" if it is
	err     error  // a deployment the Locker refuses, for good
}

// notAtomic is the warning about FerretDB 1.x without a serializing proxy.
const notAtomic = "mutual exclusion is not guaranteed: FerretDB 1.x does not make single-document writes atomic, " +
	"and no serializing proxy is in front of it"

// probe learns the deployment on its first successful call. Behind mongos
// it refuses a sharded lock collection: the documents of its locks would
// live on several shards, each stamping times with its own clock, while
// the estimate of the server's clock comes from one of them; and updates
// of several documents can count orphans there. A server that does not let
// this keeper read config.collections (Unauthorized) is taken to be
// unsharded: Renew confirms every renewal by reading it back behind mongos
// anyway. Any other failure of that read is retried at the next call.
// FerretDB 1.x without a serializing proxy in front of it is used, with a
// warning logged to log, once.
func (d *deployment) probe(ctx context.Context, coll *mongo.Collection, log zerolog.Logger) error {
	d.mu.Lock()
	known, err := d.known, d.err
	d.mu.Unlock()
	if known {
		return err
	}
	what := "probe the deployment (" + lockColl(coll) + ")"
	// One call probes; the others wait for it, or for their contexts.
	if err := d.probing.Lock(ctx); err != nil {
		return mongoutil.WrapErr(ctx, what, err)
	}
	defer d.probing.Unlock()
	d.mu.Lock()
	known, err = d.known, d.err
	d.mu.Unlock()
	if known {
		return err
	}
	dep, err := mongoutil.Probe(ctx, coll.Database())
	if err != nil {
		return mongoutil.WrapErr(ctx, what, err)
	}
	var refused error // for good
	if dep.Sharded {
		sharded, err := isSharded(ctx, coll)
		var se mongo.ServerError
		if err != nil && !(errors.As(err, &se) && se.HasErrorCode(codeUnauthorized)) {
			return mongoutil.WrapErr(ctx, what, err)
		}
		if sharded {
			refused = fmt.Errorf("%w: %s is sharded: keep it unsharded", ErrUnsupportedDeployment, lockColl(coll))
		}
	}
	var warning string
	if dep.FerretDB1 && !dep.Serialized {
		warning = notAtomic
		log.Warn().Str("collection", mongoutil.Namespace(coll)).Str("ferretdb", dep.FerretDBVersion).Msg(notAtomic)
	}
	d.mu.Lock()
	d.known, d.isMongo, d.warning, d.err = true, dep.Sharded, warning, refused
	d.mu.Unlock()
	return refused
}

// warned returns the warning the probe logged, if any.
func (d *deployment) warned() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.warning
}

// deploymentWarning is the warning the Locker logged about its deployment,
// once it probed it; "" if none. A Session reports it to its observers.
func (l *Locker) deploymentWarning() string { return l.deploy.warned() }

// lockColl names the lock collection coll in errors.
func lockColl(coll *mongo.Collection) string {
	return fmt.Sprintf("lock collection %q", mongoutil.Namespace(coll))
}

// sharded reports whether the Locker talks to mongos.
func (d *deployment) sharded() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.isMongo
}

// isSharded reads config.collections, which mongos keeps for every sharded
// collection. An error means it cannot tell.
func isSharded(ctx context.Context, coll *mongo.Collection) (bool, error) {
	cfg := coll.Database().Client().Database("config").Collection("collections",
		options.Collection().SetReadPreference(readpref.Primary()))
	var doc struct {
		Key     bson.Raw `bson:"key"`
		Dropped bool     `bson:"dropped"`
		// MongoDB 8.0 tracks unsharded collections too, as unsplittable.
		Unsplittable bool `bson:"unsplittable"`
	}
	err := cfg.FindOne(ctx, bson.D{{Key: "_id", Value: coll.Database().Name() + "." + coll.Name()}}).Decode(&doc)
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	case err != nil:
		return false, err
	}
	return !doc.Dropped && !doc.Unsplittable && len(doc.Key) > 0, nil
}

// codeUnauthorized is the server's error code for a command the user may
// not run.
const codeUnauthorized = 13
