package health

import (
	"context"
	"fmt"
	"time"

	"github.com/jonboulle/clockwork"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
)

// databaseCheck is the readiness check of one database a watched Session
// stores its locks in: that it answers, and, while no migrator is watched,
// that the migrations are applied (migs).
type databaseCheck struct {
	db      *mongo.Database
	clock   clockwork.Clock
	timeout time.Duration
	migs    *migratorCheck
}

// ping asks the database for a round trip, bounded by the check timeout.
func (d *databaseCheck) ping(ctx context.Context) Check {
	rctx, cancel := lock.WithTimeout(ctx, d.clock, d.timeout)
	defer cancel()
	start := d.clock.Now()
	if err := d.db.RunCommand(rctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		return Check{Reason: fmt.Sprintf("database %q did not answer within %v: %v", d.db.Name(), d.timeout, err)}
	}
	return Check{OK: true, Reason: fmt.Sprintf("database %q answered in %v", d.db.Name(), dur(d.clock.Since(start)))}
}

// dbKey tells databases apart: one client's database of one name.
type dbKey struct {
	client *mongo.Client
	name   string
}

// watchDatabaseLocked adds the database of a watched Session's lock.Locker
// to readiness, with a migrator of the module's migrations (on its lock
// collection) and those of WithMigrationOptions.
func (c *Checker) watchDatabaseLocked(l *lock.Locker) error {
	coll := l.Collection()
	db := coll.Database()
	key := dbKey{db.Client(), db.Name()}
	if _, ok := c.dbKeys[key]; ok {
		return nil
	}
	opts := append([]migrations.Option{migrations.WithLockCollection(coll.Name())}, c.cfg.migOpts...)
	m, err := migrations.New(db, opts...)
	if err != nil {
		return fmt.Errorf("health: watch database %q: %w", db.Name(), err)
	}
	if c.dbKeys == nil {
		c.dbKeys = make(map[dbKey]struct{})
	}
	c.dbKeys[key] = struct{}{}
	c.databases = append(c.databases, &databaseCheck{db: db, clock: c.clock, timeout: c.cfg.checkTimeout,
		migs: &migratorCheck{m: recordedMigrator{m}, clock: c.clock, timeout: c.cfg.checkTimeout}})
	return nil
}

// recordedMigrator is the status of the default migrations check: the
// module's own migrations (negative versions) count as applied once a
// record says so, whatever options they were applied with (another
// scheduler history, another retention): what the check is for is a
// `migrate up` forgotten at deploy, not the options of the deploy step.
type recordedMigrator struct{ m *migrations.Migrator }

func (r recordedMigrator) Status(ctx context.Context) ([]migrations.Entry, error) {
	es, err := r.m.Status(ctx)
	for i, e := range es {
		if e.Version < 0 && e.Record != nil && e.Record.State == migrations.StateApplied {
			es[i].State = migrations.StateApplied
		}
	}
	return es, err
}
