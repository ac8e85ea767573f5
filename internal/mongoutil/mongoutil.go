// Package mongoutil holds the few MongoDB chores lock, scheduler,
// migrations and the command line share: reading the server's clock,
// keeping indexes (including TTL indexes on servers that lack them, such as
// FerretDB), checking collection names and wrapping errors.
package mongoutil

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/readpref"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// Server error codes this module tells apart, in one place: those the
// driver has no helper for (mongo.IsDuplicateKeyError and its kin come
// first).
const (
	CodeInternalError       = 1
	CodeBadValue            = 2
	CodeFailedToParse       = 9
	CodeNamespaceNotFound   = 26
	CodeIndexNotFound       = 27
	CodeCommandNotFound     = 59
	CodeInvalidOptions      = 72
	CodeCommandNotSupported = 115
	CodeNotImplemented      = 238
	CodeUnknownField        = 40415 // IDLUnknownField: an argument the command does not know
	// CodeDeadlockDetected is FerretDB 2.x's code for PostgreSQL's
	// deadlock_detected (SQLSTATE 40P01, packed as PostgreSQL packs
	// SQLSTATEs, six bits a character): PostgreSQL rolled the command's
	// transaction back to break a cycle of row locks with another one.
	// MongoDB never reports it.
	CodeDeadlockDetected = 16908292
)

// IsDeadlock reports whether err says the server broke a deadlock by
// rolling back the command, or one of a bulk write's writes (FerretDB 2.x,
// CodeDeadlockDetected): what it rolled back was not applied and may be sent
// again.
func IsDeadlock(err error) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(CodeDeadlockDetected)
}

// transientCodes are server error codes that say nothing about the
// command itself: the server was stepping down, shutting down, busy or out
// of time, the cluster was changing shape, or the write lost a race it
// may win when sent again.
var transientCodes = []int{
	6, 7, 24, 46, 50, 64, 89, 91, 112, 133, 189, 202, 262, 9001, 10058, 10107,
	11600, 11601, 11602, 13388, 13435, 13436, 16500, CodeDeadlockDetected,
}

// Transient reports whether err says the database could not be reached or
// could not answer in time (a network error, a timeout, no server to
// select, an election, a shutdown, a retryable write error): the same
// command may succeed later. A server's refusal of the command itself, a
// disconnected client and errors of unknown kind are not.
func Transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, mongo.ErrClientDisconnected):
		return false
	case mongo.IsTimeout(err), mongo.IsNetworkError(err), errors.As(err, new(topology.ServerSelectionError)):
		return true
	}
	var se mongo.ServerError
	if !errors.As(err, &se) {
		return false
	}
	for _, l := range []string{"RetryableWriteError", "TransientTransactionError", "NetworkError"} {
		if se.HasErrorLabel(l) {
			return true
		}
	}
	for _, c := range transientCodes {
		if se.HasErrorCode(c) {
			return true
		}
	}
	return false
}

// ServerTime reads the clock of the server the client talks to (hello's
// localTime; isMaster on MongoDB before 4.4.2, which lacks hello). Behind
// mongos or a load balancer that is mongos's clock, not that of the shard
// that stamps documents: good for retention periods, not for leases (see
// ReadClock).
func ServerTime(ctx context.Context, db *mongo.Database) (time.Time, error) {
	var res struct {
		LocalTime time.Time `bson:"localTime"`
	}
	err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&res)
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == CodeCommandNotFound {
		err = db.RunCommand(ctx, bson.D{{Key: "isMaster", Value: 1}}).Decode(&res)
	}
	if err != nil {
		return time.Time{}, err
	}
	if res.LocalTime.IsZero() {
		return time.Time{}, errors.New("hello reply has no localTime")
	}
	return res.LocalTime, nil
}

// ClockDocID is the _id of the document ReadClock writes in a collection:
// not a string, so it never collides with a lock id.
var ClockDocID = bson.D{{Key: "mongolock", Value: "clock"}}

// ClockField is the field ReadClock stamps.
const ClockField = "now"

// ReadClock reads the clock of the node that stores coll's documents: it
// stamps the server's time into the document ClockDocID of coll with
// $currentDate and reads it back, in one round trip. Behind mongos that is
// the clock of the shard holding the (unsharded) collection, the one
// $currentDate stamps its other documents with, where hello would answer
// with mongos's own. The write is acknowledged by the primary alone: the
// reading needs no durability, and a shorter round trip bounds it tighter.
//
// The upsert's filter has a condition besides the _id, that the document
// has a time: FerretDB 2.x runs an _id-only upsert that collides with a
// racer's insert as a replacement of its document. Harmless here (each
// reads back its own stamp), but it is one rule for every upsert: the
// first readers of a new collection may collide instead, and the one
// that does sends its write again, which finds the document there. A
// clock document without a time, which ReadClock never writes, is an
// error that says so.
func ReadClock(ctx context.Context, coll *mongo.Collection) (time.Time, error) {
	c := coll.Clone(options.Collection().SetWriteConcern(writeconcern.W1()))
	var doc struct {
		Now time.Time `bson:"now"`
	}
	read := func() error {
		return c.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: ClockDocID}, {Key: ClockField, Value: bson.D{{Key: "$exists", Value: true}}}},
			bson.D{{Key: "$currentDate", Value: bson.D{{Key: ClockField, Value: true}}}},
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Decode(&doc)
	}
	err := read()
	if IsDuplicateKey(err) {
		err = read()
	}
	if IsDuplicateKey(err) {
		return time.Time{}, fmt.Errorf("the clock document (_id {mongolock: \"clock\"}) in %s has no %q field: delete it: %w", Namespace(coll), ClockField, err)
	}
	if err != nil {
		return time.Time{}, err
	}
	if doc.Now.IsZero() {
		return time.Time{}, errors.New("clock document has no time")
	}
	return doc.Now, nil
}

// Deployment is what Probe learns of the server a client talks to.
type Deployment struct {
	// Sharded reports a mongos (directly or behind a load balancer):
	// hello's msg is "isdbgrid".
	Sharded bool
	// FerretDB1 reports FerretDB before 2.0 (BuildInfo.FerretDB). It does
	// not make single-document writes atomic: findAndModify, update and
	// delete read the matching documents, then write them by _id.
	FerretDB1 bool
	// FerretDB2 reports FerretDB 2.x (PostgreSQL with DocumentDB).
	FerretDB2 bool
	// FerretDBVersion is the version FerretDB reports ("unknown" in
	// builds without version information, such as the embedded server).
	FerretDBVersion string
	// Serialized reports a proxy in front of FerretDB 1.x that answered
	// SerializedCommand: it lets one command at a time reach the server,
	// which makes every command atomic. Only asked of FerretDB 1.x.
	Serialized bool
}

// SerializedCommand is the command a serializing proxy in front of
// FerretDB 1.x (internal/embedded's) answers itself with {ok: 1}, to say
// that it is there. FerretDB, which does not know it, answers
// CommandNotFound.
const SerializedCommand = "mongolockSerialized"

// Probe asks the server what it is, with a hello (isMaster on MongoDB
// before 4.4.2, which lacks hello) and a buildInfo; FerretDB 1.x gets a
// SerializedCommand too. A server that refuses buildInfo (a Stable API
// strict client: buildInfo is not in API version 1) is taken for MongoDB,
// which FerretDB 1.x, which ignores the Stable API, never does.
func Probe(ctx context.Context, db *mongo.Database) (Deployment, error) {
	var res struct {
		Msg string `bson:"msg"`
	}
	err := db.RunCommand(ctx, bson.D{{Key: "hello", Value: 1}}).Decode(&res)
	var ce mongo.CommandError
	if errors.As(err, &ce) && ce.Code == CodeCommandNotFound {
		err = db.RunCommand(ctx, bson.D{{Key: "isMaster", Value: 1}}).Decode(&res)
	}
	if err != nil {
		return Deployment{}, err
	}
	dep := Deployment{Sharded: res.Msg == "isdbgrid"}
	if dep.Sharded {
		return dep, nil // FerretDB does not play mongos
	}
	info, err := ReadBuildInfo(ctx, db)
	var se mongo.ServerError
	switch {
	case errors.As(err, &se):
		return dep, nil
	case err != nil:
		return Deployment{}, err
	}
	dep.FerretDB1, dep.FerretDB2, dep.FerretDBVersion = info.FerretDB == 1, info.FerretDB == 2, info.FerretDBVersion
	if !dep.FerretDB1 {
		return dep, nil
	}
	err = db.RunCommand(ctx, bson.D{{Key: SerializedCommand, Value: 1}}).Err()
	switch {
	case err == nil:
		dep.Serialized = true
	case !errors.As(err, &se): // no answer: ask again next time
		return Deployment{}, err
	}
	return dep, nil
}

// BuildInfo is what a server's buildInfo says it is.
type BuildInfo struct {
	// Version is the MongoDB version the server reports; FerretDB reports
	// the one it is compatible with.
	Version string
	// FerretDB is FerretDB's major version, 0 for MongoDB: 1 when
	// buildInfo carries ferretdbVersion, 2 when it carries a ferretdb
	// document instead.
	FerretDB int
	// FerretDBVersion is the version FerretDB reports ("unknown" in
	// builds without version information, such as the embedded server).
	FerretDBVersion string
}

// String names the server for messages: "MongoDB 5.0.26", "FerretDB
// v2.5.0".
func (b BuildInfo) String() string {
	switch {
	case b.FerretDB == 0:
		return "MongoDB " + b.Version
	case b.FerretDBVersion == "" || b.FerretDBVersion == "unknown":
		return fmt.Sprintf("FerretDB %d.x", b.FerretDB)
	}
	return "FerretDB " + b.FerretDBVersion
}

// ReadBuildInfo asks the server what it is with a buildInfo. A Stable API
// strict client cannot send it (buildInfo is not in API version 1): then it
// returns the server's error.
func ReadBuildInfo(ctx context.Context, db *mongo.Database) (BuildInfo, error) {
	var info struct {
		Version   string  `bson:"version"`
		FerretDB1 *string `bson:"ferretdbVersion"`
		FerretDB2 *struct {
			Version string `bson:"version"`
		} `bson:"ferretdb"`
	}
	if err := db.RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Decode(&info); err != nil {
		return BuildInfo{}, err
	}
	b := BuildInfo{Version: info.Version}
	switch {
	case info.FerretDB2 != nil:
		b.FerretDB, b.FerretDBVersion = 2, info.FerretDB2.Version
	case info.FerretDB1 != nil:
		b.FerretDB, b.FerretDBVersion = 1, *info.FerretDB1
	}
	return b, nil
}

// IsDuplicateKey reports whether err says a write found a document with
// the same unique key: MongoDB's E11000 (mongo.IsDuplicateKeyError), or
// FerretDB 2.x's answer to a findAndModify upsert that collides on _id,
// which PostgreSQL's unique violation reaches the client as: an
// InternalError (code 1) whose message is PostgreSQL's. Only that exact
// shape counts; any other internal error is an error.
func IsDuplicateKey(err error) bool {
	if mongo.IsDuplicateKeyError(err) {
		return true
	}
	var ce mongo.CommandError
	return errors.As(err, &ce) && ce.Code == CodeInternalError &&
		strings.HasPrefix(ce.Message, pgUniqueViolation) && strings.Contains(ce.Message, `"collection_pk_`)
}

// pgUniqueViolation begins PostgreSQL's message for SQLSTATE 23505.
const pgUniqueViolation = "duplicate key value violates unique constraint "

// Primary returns coll with primary read preference: for every read that
// decides something, which a lagging secondary could answer with the past.
func Primary(coll *mongo.Collection) *mongo.Collection {
	return coll.Clone(options.Collection().SetReadPreference(readpref.Primary()))
}

// IndexSpec is what EnsureIndexes looks at in an existing index.
type IndexSpec struct {
	Name               string `bson:"name"`
	ExpireAfterSeconds *int64 `bson:"expireAfterSeconds"`
}

// Indexes lists coll's indexes by name; a missing collection has none.
// They are read from the primary, whatever coll's read preference: what
// they say decides what to change.
func Indexes(ctx context.Context, coll *mongo.Collection) (map[string]IndexSpec, error) {
	cur, err := Primary(coll).Indexes().List(ctx)
	var se mongo.ServerError
	if errors.As(err, &se) && se.HasErrorCode(CodeNamespaceNotFound) {
		return map[string]IndexSpec{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list indexes of collection %q: %w", Namespace(coll), err)
	}
	var specs []IndexSpec
	if err := cur.All(ctx, &specs); err != nil {
		return nil, fmt.Errorf("list indexes of collection %q: %w", Namespace(coll), err)
	}
	out := make(map[string]IndexSpec, len(specs))
	for _, s := range specs {
		out[s.Name] = s
	}
	return out, nil
}

// Index is an index EnsureIndexes keeps: a plain one, or with TTL set one
// that expires documents TTLSeconds after the time in its key (capped at
// what the server accepts).
type Index struct {
	Name       string
	Keys       bson.D
	TTL        bool
	TTLSeconds int64
}

// EnsureIndexes creates those of ixs that coll lacks by name, listing its
// indexes once. An existing TTL index with another value is changed in
// place with collMod; it is never dropped. A plain index already there is
// left as it is, even where a TTL index is asked for. A server without TTL
// indexes gets a plain index and a call to warn.
func EnsureIndexes(ctx context.Context, coll *mongo.Collection, warn func(string), ixs ...Index) error {
	existing, err := Indexes(ctx, coll)
	if err != nil {
		return err
	}
	for _, ix := range ixs {
		if err := ensureIndex(ctx, coll, existing, ix, warn); err != nil {
			return err
		}
	}
	return nil
}

func ensureIndex(ctx context.Context, coll *mongo.Collection, existing map[string]IndexSpec, ix Index, warn func(string)) error {
	seconds := int64(clamp32(ix.TTLSeconds))
	if cur, ok := existing[ix.Name]; ok {
		if !ix.TTL || cur.ExpireAfterSeconds == nil || *cur.ExpireAfterSeconds == seconds {
			return nil
		}
		err := coll.Database().RunCommand(ctx, bson.D{
			{Key: "collMod", Value: coll.Name()},
			{Key: "index", Value: bson.D{{Key: "name", Value: ix.Name}, {Key: "expireAfterSeconds", Value: seconds}}},
		}).Err()
		if err != nil {
			return fmt.Errorf("change expireAfterSeconds of index %q: %w", ix.Name, err)
		}
		return nil
	}
	m := mongo.IndexModel{Keys: ix.Keys, Options: options.Index().SetName(ix.Name)}
	if ix.TTL {
		m.Options.SetExpireAfterSeconds(int32(seconds))
	}
	_, err := coll.Indexes().CreateOne(ctx, m)
	var se mongo.ServerError
	if ix.TTL && errors.As(err, &se) && se.HasErrorCode(CodeNotImplemented) {
		warn(fmt.Sprintf("server does not implement TTL indexes; index %s is a plain index: %v", ix.Name, err))
		m.Options = options.Index().SetName(ix.Name)
		_, err = coll.Indexes().CreateOne(ctx, m)
	}
	if err != nil {
		return fmt.Errorf("create index %q: %w", ix.Name, err)
	}
	return nil
}

func clamp32(n int64) int32 {
	const maxInt32 = 1<<31 - 1
	return int32(min(max(n, 0), maxInt32))
}

// Namespace is coll's full name, "database.collection", for messages.
func Namespace(coll *mongo.Collection) string {
	return coll.Database().Name() + "." + coll.Name()
}

// ValidCollectionName reports whether name can be a collection of ours:
// not empty, no '$' or NUL, not a system collection.
func ValidCollectionName(name string) bool {
	return name != "" && !strings.ContainsAny(name, "$\x00") && !strings.HasPrefix(name, "system.")
}

// WrapErr prefixes err with what was being done and, when ctx has ended,
// surfaces ctx's own error as well: the driver's errors stop wrapping
// context.DeadlineExceeded once the context is done, and callers test for
// it with errors.Is.
func WrapErr(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		// The cause tells a timeout (lock.WithTimeout) from a cancellation.
		return fmt.Errorf("%s: %w (%w)", what, context.Cause(ctx), err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// OnlyDuplicateKeys reports whether err is a bulk write's report of
// duplicate keys alone, with no write concern error: the writes that did
// not fail are as durable as asked, and each that failed found a document
// it may not change.
func OnlyDuplicateKeys(err error) bool { return OnlyWriteErrors(err, IsDuplicateKey) }

// OnlyWriteErrors reports whether err is a bulk write's report of write
// errors alone, with no write concern error, each of which one of kinds
// reports (IsDuplicateKey, IsDeadlock): the writes that did not fail are
// as durable as asked.
func OnlyWriteErrors(err error, kinds ...func(error) bool) bool {
	var bwe mongo.BulkWriteException
	if !errors.As(err, &bwe) || bwe.WriteConcernError != nil || len(bwe.WriteErrors) == 0 {
		return false
	}
	for _, we := range bwe.WriteErrors {
		if !slices.ContainsFunc(kinds, func(kind func(error) bool) bool { return kind(we.WriteError) }) {
			return false
		}
	}
	return true
}

// OneBatch is the find options of a read of at most n documents (by their
// ids, say) in one reply: no getMore round trip, and no cursor left open
// on the server. That matters beyond the round trip: a cursor whose read
// was cancelled between batches is not killed (the driver kills it with
// the cancelled context), and FerretDB 1.x keeps the SQLite connection of
// an open cursor until then; enough of them exhaust its pool and every
// write waits for ever.
func OneBatch(n int) *options.FindOptionsBuilder {
	// n+1: FerretDB closes the cursor only when a batch comes short.
	return options.Find().SetBatchSize(int32(min(max(n+1, 1), math.MaxInt32)))
}
