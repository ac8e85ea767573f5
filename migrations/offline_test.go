package migrations

// Tests that need no server: validation, checksums and index decisions,
// options, and error classification.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/locktest"
)

func TestPrepareRejects(t *testing.T) {
	t.Parallel()
	up := func(context.Context, *mongo.Database) error { return nil }
	tests := []struct {
		name string
		migs []Migration
		want string
	}{
		{"no version", []Migration{{Definition: "x", Up: up}}, "no version"},
		{"duplicate", []Migration{{Version: 1, Definition: "x", Up: up}, {Version: 1, Definition: "y", Up: up}}, "version 1 is used"},
		{"no up", []Migration{{Version: 1, Definition: "x"}}, "has no Up"},
		{"no definition", []Migration{{Version: 1, Up: up}}, "no Definition"},
		{"no keys", []Migration{EnsureIndex(1, Index{Collection: "c"})}, "no keys"},
		{"bad collection", []Migration{EnsureIndex(1, Index{Collection: "a$b", Keys: bson.D{{Key: "a", Value: 1}}})}, "invalid collection"},
		{"bad key value", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 2}}})}, "not 1 or -1"},
		{"text key", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: "text"}}})}, "not supported"},
		{"repeated key", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}, {Key: "a", Value: -1}}})}, "twice"},
		{"negative ttl", []Migration{EnsureIndex(1, Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}}, ExpireAfterSeconds: TTL(-time.Second)})}, "negative"},
		{"reserved name", []Migration{EnsureIndex(1, Index{Collection: "c", Name: "_id_", Keys: bson.D{{Key: "a", Value: 1}}})}, "reserved"},
		{"drop all", []Migration{DropIndex(1, "c", "*")}, "invalid index name"},
		{"lock collection", []Migration{LockIndexes("a$b")}, "invalid lock collection name"},
		{"history retention", []Migration{SchedulerIndexes("runs", time.Millisecond)}, "at least 1s"},
		{"runs collection", []Migration{SchedulerIndexes("", time.Hour)}, "invalid scheduler runs collection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := prepare(tt.migs)
			if !errors.Is(err, ErrInvalidMigration) || !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalidMigration (and lock.ErrInvalidArgument) containing %q", err, tt.want)
			}
		})
	}
}

func TestPrepareSorts(t *testing.T) {
	t.Parallel()
	up := func(context.Context, *mongo.Database) error { return nil }
	got, err := prepare([]Migration{{Version: 3, Definition: "c", Up: up}, {Version: -1, Definition: "a", Up: up}, {Version: 2, Definition: "b", Up: up}})
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, m := range got {
		vs = append(vs, m.Version)
	}
	if !slices.Equal(vs, []int64{-1, 2, 3}) {
		t.Fatalf("order %v, want [-1 2 3]", vs)
	}
}

func TestIndexChecksum(t *testing.T) {
	t.Parallel()
	base := Index{Collection: "c", Keys: bson.D{{Key: "a", Value: 1}, {Key: "b", Value: -1}}}
	sum := EnsureIndex(1, base).Checksum()

	same := base
	same.Keys = bson.D{{Key: "a", Value: int64(1)}, {Key: "b", Value: -1.0}}
	same.Name = "a_1_b_-1"
	same.AllowRebuild = true
	if got := EnsureIndex(1, same).Checksum(); got != sum {
		t.Errorf("numeric types, default name or AllowRebuild changed the checksum")
	}
	for name, mod := range map[string]func(*Index){
		"unique":     func(ix *Index) { ix.Unique = true },
		"sparse":     func(ix *Index) { ix.Sparse = true },
		"ttl":        func(ix *Index) { ix.ExpireAfterSeconds = TTL(time.Hour) },
		"hidden":     func(ix *Index) { ix.Hidden = true },
		"partial":    func(ix *Index) { ix.PartialFilter = bson.D{{Key: "a", Value: bson.D{{Key: "$gt", Value: 1}}}} },
		"key order":  func(ix *Index) { ix.Keys = bson.D{{Key: "b", Value: -1}, {Key: "a", Value: 1}} },
		"direction":  func(ix *Index) { ix.Keys = bson.D{{Key: "a", Value: 1}, {Key: "b", Value: 1}} },
		"name":       func(ix *Index) { ix.Name = "other" },
		"collection": func(ix *Index) { ix.Collection = "d" },
	} {
		ix := base
		mod(&ix)
		if EnsureIndex(1, ix).Checksum() == sum {
			t.Errorf("changing %s did not change the checksum", name)
		}
	}
	if a, b := LockIndexes("locks"), LockIndexes("other"); a.Checksum() == b.Checksum() {
		t.Error("the lock collection is not part of the built-in migration's checksum")
	}
	if a, b := SchedulerIndexes("runs", time.Hour), SchedulerIndexes("runs", 2*time.Hour); a.Checksum() == b.Checksum() {
		t.Error("the history retention is not part of the built-in migration's checksum")
	}
}

func i64(n int64) *int64 { return &n }

func TestIndexDecide(t *testing.T) {
	t.Parallel()
	spec := func(ix Index) indexSpec {
		ix.Collection = "c"
		if ix.Keys == nil {
			ix.Keys = bson.D{{Key: "a", Value: 1}}
		}
		s, err := ix.check()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	keysA := []keyPart{{Field: "a", Num: 1}}
	keysB := []keyPart{{Field: "b", Num: 1}}
	tests := []struct {
		name     string
		want     Index
		existing []existingIndex
		kind     actionKind
		ttl      *int32
		hidden   *bool
		errText  string
	}{
		{name: "absent", want: Index{}, kind: actCreate},
		{name: "same", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actNone},
		{name: "ttl changed", want: Index{ExpireAfterSeconds: TTL(time.Minute)}, existing: []existingIndex{{Name: "a_1", Keys: keysA, TTL: i64(30)}}, kind: actModify, ttl: TTL(time.Minute)},
		{name: "ttl added", want: Index{ExpireAfterSeconds: TTL(time.Minute)}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actModify, ttl: TTL(time.Minute)},
		{name: "ttl removed", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA, TTL: i64(30)}}, kind: actConflict, errText: "expireAfterSeconds 30 -> none"},
		{name: "hidden", want: Index{Hidden: true}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actModify, hidden: new(true)},
		{name: "unhidden", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA, Hidden: true}}, kind: actModify, hidden: new(false)},
		{name: "unique", want: Index{Unique: true}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actConflict, errText: "unique false -> true"},
		{name: "unique rebuild", want: Index{Unique: true, AllowRebuild: true}, existing: []existingIndex{{Name: "a_1", Keys: keysA}}, kind: actRebuild},
		{name: "keys", want: Index{Name: "a_1"}, existing: []existingIndex{{Name: "a_1", Keys: keysB}}, kind: actConflict, errText: `keys {"b":1} -> {"a":1}`},
		{name: "foreign option", want: Index{}, existing: []existingIndex{{Name: "a_1", Keys: keysA, Other: []string{`collation={"locale": "fr"}`}}}, kind: actConflict, errText: "collation"},
		{name: "same keys other name", want: Index{Name: "mine"}, existing: []existingIndex{{Name: "theirs", Keys: keysA}}, kind: actConflict, errText: `"theirs"`},
		{name: "same keys other partial", want: Index{Name: "mine"}, existing: []existingIndex{{Name: "theirs", Keys: keysA, PartialFilter: `{"a":1}`}}, kind: actCreate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			existing := map[string]existingIndex{}
			for _, e := range tt.existing {
				existing[e.Name] = e
			}
			s := spec(tt.want)
			a := s.decide(existing)
			if a.kind != tt.kind {
				t.Fatalf("kind %d, want %d (%+v)", a.kind, tt.kind, a)
			}
			if (a.ttl == nil) != (tt.ttl == nil) || a.ttl != nil && *a.ttl != *tt.ttl {
				t.Errorf("ttl %v, want %v", a.ttl, tt.ttl)
			}
			if (a.hidden == nil) != (tt.hidden == nil) || a.hidden != nil && *a.hidden != *tt.hidden {
				t.Errorf("hidden %v, want %v", a.hidden, tt.hidden)
			}
			if tt.kind == actConflict {
				if !errors.Is(a.err, ErrIndexConflict) || !strings.Contains(a.err.Error(), tt.errText) {
					t.Errorf("err = %v, want ErrIndexConflict containing %q", a.err, tt.errText)
				}
			}
			if len(a.describe(s)) == 0 {
				t.Error("no description")
			}
		})
	}
}

func TestOptionsRejected(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opt   Option
		names string // the option, in the message
		badID bool   // also lock.ErrInvalidArgument
	}{
		{"collection", WithCollection(""), "WithCollection", false},
		{"system collection", WithCollection("system.x"), "WithCollection", false},
		{"lock collection", WithLockCollection("a$"), "WithLockCollection", false},
		{"lock ttl", WithLockTTL(time.Millisecond), "WithLockTTL", false},
		{"long lock ttl", WithLockTTL(lock.MaxTTL + time.Second), "WithLockTTL", false},
		{"lock id", WithLockID(""), "WithLockID", true},
		{"lock id nul", WithLockID("a\x00b"), "WithLockID", true},
		{"session", WithSession(nil), "WithSession", false},
		{"observer", WithObserver(nil), "WithObserver", false},
		{"wait", WithWait(-time.Second), "WithWait", false},
		{"retry", WithRetryPeriod(0), "WithRetryPeriod", false},
		{"history", WithSchedulerHistory("runs", 10*time.Millisecond), "WithSchedulerHistory", false},
		{"runs collection", WithSchedulerHistory("", time.Hour), "WithSchedulerHistory", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c config
			err := tt.opt(&c)
			if !errors.Is(err, ErrInvalidOption) || !errors.Is(err, lock.ErrInvalidOption) {
				t.Fatalf("err = %v, want ErrInvalidOption and lock.ErrInvalidOption", err)
			}
			if tt.badID && !errors.Is(err, lock.ErrInvalidArgument) {
				t.Errorf("err = %v, want lock.ErrInvalidArgument too", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.names) || strings.Count(msg, "migrations:") != 1 || strings.Count(msg, "invalid option") != 1 {
				t.Errorf("err = %q, want it to name %s, with one prefix", msg, tt.names)
			}
		})
	}
}

func TestSessionExcludesOptions(t *testing.T) {
	t.Parallel()
	s, err := lock.NewSession(newMemStore(clockwork.NewFakeClock()))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tt := range []struct {
		opts  []Option
		names string
	}{
		{[]Option{WithLockCollection("mine")}, "WithLockCollection"},
		{[]Option{WithLockTTL(time.Minute)}, "WithLockTTL"},
		{[]Option{WithLogger(zerolog.Nop())}, "WithLogger"},
		{[]Option{WithObserver(NewRecorder()), WithLockTTL(time.Minute), WithObserver(NewRecorder())}, "WithObserver, WithLockTTL:"},
	} {
		for _, first := range []bool{true, false} {
			opts := append([]Option{WithSession(s)}, tt.opts...)
			if !first {
				opts = append(tt.opts, WithSession(s))
			}
			_, err := configure(opts)
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "WithSession cannot be combined with "+tt.names) {
				t.Errorf("WithSession and %s: err = %v, want ErrInvalidOption naming them", tt.names, err)
			}
		}
	}
	cfg, err := configure([]Option{WithSession(s), WithLockID("mine"), WithWait(time.Second), WithRetryPeriod(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.lockTTL != fakeTTL || cfg.lockID != "mine" {
		t.Errorf("lock TTL %v, id %q; want the session's TTL %v and the id given", cfg.lockTTL, cfg.lockID, fakeTTL)
	}
	if _, err := configure([]Option{WithSession(s), WithRetryPeriod(fakeTTL)}); !errors.Is(err, ErrInvalidOption) ||
		!strings.Contains(err.Error(), "WithRetryPeriod") {
		t.Errorf("retry period of the session's TTL: %v, want ErrInvalidOption naming WithRetryPeriod", err)
	}
}

// The lock collection's indexes do not depend on the lease TTL: lockers
// with different TTLs share the collection, and a migrator run with another
// TTL than the one before finds the built-in migration unchanged.
func TestLockIndexesIgnoreLockTTL(t *testing.T) {
	t.Parallel()
	// New does no I/O: nothing listens on this address.
	client, err := mongo.Connect(options.Client().ApplyURI("mongodb://127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database("unused")
	lockIndexes := func(t *testing.T, opts ...Option) Migration {
		t.Helper()
		m, err := New(db, opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, mig := range m.Migrations() {
			if mig.Version == LockIndexesVersion {
				return mig
			}
		}
		t.Fatal("no built-in lock index migration")
		return Migration{}
	}
	base := lockIndexes(t)
	want := fmt.Sprintf("expireAfterSeconds=%d", lock.TTLSeconds(lock.Retention))
	if !strings.Contains(base.Definition, want) {
		t.Errorf("definition %q, want the fixed %s of lock.Retention", base.Definition, want)
	}
	if base.Definition != LockIndexes(lock.DefaultCollection).Definition {
		t.Errorf("New registers %q, LockIndexes describes %q", base.Definition, LockIndexes(lock.DefaultCollection).Definition)
	}
	for _, ttl := range []time.Duration{time.Second, 6 * time.Second, time.Hour, lock.MaxTTL} {
		got := lockIndexes(t, WithLockTTL(ttl))
		if got.Definition != base.Definition || got.Checksum() != base.Checksum() {
			t.Errorf("WithLockTTL(%v): definition %q, want %q as with the default TTL", ttl, got.Definition, base.Definition)
		}
	}
	s, err := lock.NewSession(locktest.New(locktest.WithClock(clockwork.NewFakeClock()), locktest.WithTTL(7*time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := lockIndexes(t, WithSession(s)); got.Definition != base.Definition {
		t.Errorf("WithSession of a 7s store: definition %q, want %q", got.Definition, base.Definition)
	}
}

func TestUnsupported(t *testing.T) {
	t.Parallel()
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	refusal := mongo.CommandError{Code: 72, Name: "InvalidOptions", Message: "unknown option hidden"}
	tests := []struct {
		name        string
		ctx         context.Context
		err         error
		ttl, hidden bool // for a TTL change (only 238, 115), for hidden (also a refusal naming it)
	}{
		{"nil", live, nil, false, false},
		{"not implemented", live, mongo.CommandError{Code: 238, Name: "NotImplemented"}, true, true},
		{"wrapped", live, fmt.Errorf("collMod: %w", mongo.CommandError{Code: 238}), true, true},
		{"refusal", live, refusal, false, true},
		{"FerretDB 2.x internal error", live, mongo.CommandError{Code: 1, Message: "index option hidden is not supported"}, false, true},
		{"ctx ended", ended, mongo.CommandError{Code: 238}, false, false},
		{"network", live, mongo.CommandError{Code: 72, Labels: []string{"NetworkError"}}, false, false},
		{"retryable", live, mongo.CommandError{Code: 72, Labels: []string{"RetryableWriteError"}}, false, false},
		{"not primary", live, mongo.CommandError{Code: 10107, Name: "NotWritablePrimary"}, false, false},
		{"index gone", live, mongo.CommandError{Code: 27, Name: "IndexNotFound"}, false, false},
		{"duplicate key", live, mongo.CommandError{Code: 11000, Message: "E11000 duplicate key error"}, false, false},
		{"FerretDB 2.x duplicate key", live, mongo.CommandError{Code: 1,
			Message: `duplicate key value violates unique constraint "collection_pk_12"`}, false, false},
		{"timeout", live, mongo.CommandError{Code: 50, Name: "MaxTimeMSExpired"}, false, false},
		{"command not supported", live, mongo.CommandError{Code: 115, Name: "CommandNotSupported"}, true, true},
		{"refusal not naming hidden", live, mongo.CommandError{Code: 2, Name: "BadValue", Message: "bad partial filter"}, false, false},
		{"index catalog full", live, mongo.CommandError{Code: 67, Name: "CannotCreateIndex", Message: "add index fails, too many indexes (hidden ones count)"}, false, false},
		{"not a server error", live, errors.New("boom"), false, false},
		{"context error", live, context.DeadlineExceeded, false, false},
	}
	for _, tt := range tests {
		if got := unsupported(tt.ctx, tt.err, ""); got != tt.ttl {
			t.Errorf("%s: unsupported(no option) = %t, want %t", tt.name, got, tt.ttl)
		}
		if got := unsupported(tt.ctx, tt.err, "hidden"); got != tt.hidden {
			t.Errorf("%s: unsupported(hidden) = %t, want %t", tt.name, got, tt.hidden)
		}
	}
	err := &unsupportedError{what: `hide index "x" on "c"`, feature: "hidden indexes (collMod index.hidden)", err: refusal}
	if !errors.Is(err, ErrUnsupported) || !errors.As(err, new(mongo.CommandError)) {
		t.Errorf("%v matches ErrUnsupported %t; want it and the server's error", err, errors.Is(err, ErrUnsupported))
	}
	if want := `hide index "x" on "c": the server does not support hidden indexes (collMod index.hidden): `; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("message %q, want it to begin %q", err.Error(), want)
	}
}
