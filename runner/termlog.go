package runner

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/baddoc"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
)

// Defaults of the term log.
const (
	// DefaultTermsCollection holds the term log: one document per term of
	// an election.
	DefaultTermsCollection = "mongolock_terms"
	// DefaultTermRetention is how long the term log keeps a term after its
	// start (the TTL index EnsureTermIndexes makes).
	DefaultTermRetention = 7 * 24 * time.Hour
	// DefaultTermWriteTimeout bounds each write of the term log.
	DefaultTermWriteTimeout = 5 * time.Second
	// termQueue is how many writes may wait: a term log that falls
	// further behind drops events (and logs it) rather than block a term.
	termQueue = 256
)

// Index names EnsureTermIndexes creates on the terms collection.
const (
	TermsIndexName    = "lock_start"
	TermsTTLIndexName = "start_ttl"
)

// Term is one term of an election, as the term log recorded it. Times are
// the server's.
type Term struct {
	LockID   string
	KeeperID string
	Fence    uint64
	// Start is when the term's first write reached the server, End when its
	// last did: zero if the leader recorded no end (it was killed or cut
	// off; the next term's Gap tells when its lease was last renewed).
	Start, End time.Time
	// Gap is the failover gap before this term, on the server's clock: from
	// the last instant the previous term held the lock (its last renewal or
	// its release, as this term's leader read it before taking over) to
	// this term's start; zero when not known, as after a release the new
	// leader did not read (the previous term's End gives it then).
	Gap time.Duration
	// Reason says why the term ended (lock.TermEnded's reason); Lost: the
	// lease was lost rather than given up.
	Reason string
	Lost   bool
}

// TermLogOption configures a TermLog.
type TermLogOption func(*termLogConfig) error

type termLogConfig struct {
	coll    string
	log     zerolog.Logger
	clock   clockwork.Clock
	timeout time.Duration
}

// WithTermsCollection sets the collection of the term log. Default:
// DefaultTermsCollection ("mongolock_terms").
func WithTermsCollection(name string) TermLogOption {
	return func(c *termLogConfig) error {
		if !mongoutil.ValidCollectionName(name) {
			return fmt.Errorf("%w: WithTermsCollection: invalid collection name %q", ErrInvalidOption, name)
		}
		c.coll = name
		return nil
	}
}

// WithTermLogger sets the logger of failed writes. Default: zerolog.Nop().
func WithTermLogger(l zerolog.Logger) TermLogOption {
	return func(c *termLogConfig) error { c.log = l; return nil }
}

// WithTermClock sets the clock the writes' timeouts run on (the
// Session's, usually). Default: the real clock.
func WithTermClock(clk clockwork.Clock) TermLogOption {
	return func(c *termLogConfig) error {
		if clk == nil {
			return fmt.Errorf("%w: WithTermClock: nil clock", ErrInvalidOption)
		}
		c.clock = clk
		return nil
	}
}

// WithTermWriteTimeout bounds each write. Default: DefaultTermWriteTimeout.
func WithTermWriteTimeout(d time.Duration) TermLogOption {
	return func(c *termLogConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: WithTermWriteTimeout: %v is not positive", ErrInvalidOption, d)
		}
		c.timeout = d
		return nil
	}
}

// TermLog records the terms of the elections of a Session's runners in
// MongoDB, for the dashboard (package ui) and for operators: it is a
// lock.Observer of lock.TermStarted and lock.TermEnded events, and writes
// one document per term, once at its start and once at its end (two
// writes per term, whatever the term's length). The writes are made by a
// goroutine of its own, in order, so a slow server never delays a term;
// they are not part of the election, and a write that fails is logged and
// dropped. Close stops it.
//
//	terms, err := runner.NewTermLog(db)
//	session, err := lock.NewSession(locker, lock.WithObserver(terms))
//	defer terms.Close(ctx) // after the Session: its last term ends there
type TermLog struct {
	coll    *mongo.Collection
	cfg     termLogConfig
	mu      sync.Mutex // guards closed and sends on ch
	closed  bool
	ch      chan lock.Event
	done    chan struct{}
	dropped atomic.Int64
}

var _ lock.Observer = (*TermLog)(nil)

// NewTermLog returns a TermLog writing to collection DefaultTermsCollection
// (or WithTermsCollection) of db, and starts its writer.
func NewTermLog(db *mongo.Database, opts ...TermLogOption) (*TermLog, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: NewTermLog: nil database", ErrInvalidOption)
	}
	cfg := termLogConfig{coll: DefaultTermsCollection, log: zerolog.Nop(), clock: clockwork.NewRealClock(), timeout: DefaultTermWriteTimeout}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: NewTermLog: nil option", ErrInvalidOption)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	t := &TermLog{coll: db.Collection(cfg.coll), cfg: cfg, ch: make(chan lock.Event, termQueue), done: make(chan struct{})}
	go t.loop()
	return t, nil
}

// Observe queues the write of a term's start or end; other events are
// ignored. It never blocks: when the queue is full the event is dropped
// (Dropped counts them).
func (t *TermLog) Observe(e lock.Event) {
	if e.Kind != lock.TermStarted && e.Kind != lock.TermEnded {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	select {
	case t.ch <- e:
	default:
		t.dropped.Add(1)
	}
}

// Dropped returns how many events were not written because the queue was
// full or their write failed.
func (t *TermLog) Dropped() int64 { return t.dropped.Load() }

// Close stops taking events, writes those queued until ctx ends, and
// stops the writer. It returns ctx's error if writes were left.
func (t *TermLog) Close(ctx context.Context) error {
	if err := checkArgs("close term log", ctx); err != nil {
		return err
	}
	t.mu.Lock()
	if !t.closed {
		t.closed = true
		close(t.ch)
	}
	t.mu.Unlock()
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("close term log: %w", ctx.Err())
	}
}

func (t *TermLog) loop() {
	defer close(t.done)
	for e := range t.ch {
		ctx, cancel := lock.WithTimeout(context.Background(), t.cfg.clock, t.cfg.timeout)
		err := t.write(ctx, e)
		cancel()
		if err != nil {
			t.dropped.Add(1)
			t.cfg.log.Warn().Err(err).Str("lock", e.LockID).Uint64("fence", e.Fence).Msg("term log: write failed")
		}
	}
}

// termID is the _id of a term's document.
func termID(lockID string, fence uint64) string {
	return lockID + "#" + strconv.FormatUint(fence, 10)
}

func (t *TermLog) write(ctx context.Context, e lock.Event) error {
	set := bson.D{{Key: "lock", Value: e.LockID}, {Key: "fence", Value: int64(e.Fence)}, {Key: "keeper", Value: e.KeeperID}}
	stamp := "start"
	if e.Kind == lock.TermStarted {
		if e.Gap > 0 {
			set = append(set, bson.E{Key: "gap", Value: e.Gap.Milliseconds()})
		}
	} else {
		stamp = "end"
		set = append(set, bson.E{Key: "reason", Value: e.Reason}, bson.E{Key: "lost", Value: errors.Is(e.Err, lock.ErrLeaseLost)})
	}
	// The start and the end of a term are written in turn, by this loop
	// alone, and upserted: whichever is there first makes the document.
	// The filter has a condition besides the _id that every term's
	// document meets: FerretDB 2.x runs an upsert of the _id alone that
	// collides with an insert (of another TermLog given the same events)
	// as a replacement of that document, losing the stamp it holds; with
	// the condition the collision is a duplicate key, and the write sent
	// again matches the document.
	filter := bson.D{{Key: "_id", Value: termID(e.LockID, e.Fence)}, {Key: "lock", Value: bson.D{{Key: "$exists", Value: true}}}}
	update := bson.D{{Key: "$set", Value: set}, {Key: "$currentDate", Value: bson.D{{Key: stamp, Value: true}}}}
	_, err := t.coll.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	if mongoutil.IsDuplicateKey(err) {
		_, err = t.coll.UpdateOne(ctx, filter, update, options.UpdateOne().SetUpsert(true))
	}
	if err != nil {
		return mongoutil.WrapErr(ctx, "record term "+termID(e.LockID, e.Fence), err)
	}
	return nil
}

type termDoc struct {
	Lock   string    `bson:"lock"`
	Fence  int64     `bson:"fence"`
	Keeper string    `bson:"keeper"`
	Start  time.Time `bson:"start"`
	End    time.Time `bson:"end"`
	Gap    int64     `bson:"gap"`
	Reason string    `bson:"reason"`
	Lost   bool      `bson:"lost"`
}

// errMissing is the problem of a field a document must have.
var errMissing = errors.New("missing")

// LoadTerms reads the last limit terms of lockID from coll (the term log's
// collection), or of every lock if lockID is empty, newest first, from the
// primary; limit must be from 1 to 10 000. Terms whose start was not
// recorded come last. A document it cannot read (a field of the wrong
// type, a term without its lock) is skipped and returned in bad, and
// counts towards limit; the error is the read's.
func LoadTerms(ctx context.Context, coll *mongo.Collection, lockID string, limit int) (terms []Term, bad []lock.BadDocument, err error) {
	if err := checkArgs("LoadTerms", ctx, coll); err != nil {
		return nil, nil, err
	}
	if limit < 1 || limit > 10000 {
		return nil, nil, fmt.Errorf("%w: LoadTerms: limit %d not in [1, 10000]", ErrInvalidOption, limit)
	}
	filter := bson.D{}
	sort := bson.D{{Key: "start", Value: -1}}
	if lockID != "" {
		filter = bson.D{{Key: "lock", Value: lockID}}
		sort = bson.D{{Key: "lock", Value: 1}, {Key: "start", Value: -1}}
	}
	cur, err := mongoutil.Primary(coll).Find(ctx, filter, options.Find().SetSort(sort).SetLimit(int64(limit)))
	if err != nil {
		return nil, nil, mongoutil.WrapErr(ctx, "read the term log "+coll.Name(), err)
	}
	docs, bad, err := baddoc.All(ctx, cur, coll.Name(), func(d *termDoc) (string, error) {
		if d.Lock == "" {
			return "lock", errMissing
		}
		return "", nil
	})
	if err != nil {
		return nil, nil, mongoutil.WrapErr(ctx, "read the term log "+coll.Name(), err)
	}
	out := make([]Term, len(docs))
	for i, d := range docs {
		out[i] = Term{LockID: d.Lock, KeeperID: d.Keeper, Fence: uint64(d.Fence), Start: d.Start, End: d.End,
			Gap: time.Duration(d.Gap) * time.Millisecond, Reason: d.Reason, Lost: d.Lost}
	}
	return out, bad, nil
}

// EnsureTermIndexes creates the term log's indexes on coll: one to read a
// lock's terms by start, and a TTL index on the start that keeps terms for
// retention (a plain index, and a call to warn, where TTL indexes are not
// implemented, as on FerretDB 1.x: there the log grows until dropped). The
// built-in migration migrations.TermLogIndexes calls it.
func EnsureTermIndexes(ctx context.Context, coll *mongo.Collection, retention time.Duration, warn func(string)) error {
	if err := checkArgs("EnsureTermIndexes", ctx, coll); err != nil {
		return err
	}
	if retention < time.Second {
		return fmt.Errorf("%w: EnsureTermIndexes: retention %v under 1s", ErrInvalidOption, retention)
	}
	err := mongoutil.EnsureIndexes(ctx, coll, warn,
		mongoutil.Index{Name: TermsIndexName, Keys: bson.D{{Key: "lock", Value: 1}, {Key: "start", Value: -1}}},
		mongoutil.Index{Name: TermsTTLIndexName, Keys: bson.D{{Key: "start", Value: 1}}, TTL: true, TTLSeconds: int64(lock.TTLSeconds(retention))})
	if err != nil {
		return mongoutil.WrapErr(ctx, "ensure indexes of "+mongoutil.Namespace(coll), err)
	}
	return nil
}
