package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
)

// Index describes an index for EnsureIndex.
type Index struct {
	// Collection the index is on. Required.
	Collection string
	// Name of the index. The migration owns the index of this name and no
	// other. Default: the name MongoDB generates from the keys ("a_1_b_-1").
	Name string
	// Keys in order: 1 or -1, or an index type such as "hashed" or
	// "2dsphere". Text indexes are not supported. Required.
	Keys bson.D
	// Unique, Sparse and PartialFilter are as in createIndexes. Changing
	// them needs AllowRebuild.
	Unique        bool
	Sparse        bool
	PartialFilter bson.D
	// ExpireAfterSeconds makes a TTL index (see TTL). Changed in place with
	// collMod. Servers without TTL indexes (FerretDB 1.x) get a plain index
	// and a warning in the log of the migration's context (zerolog.Ctx).
	// Giving one to an existing plain index needs MongoDB 5.1 or later:
	// MongoDB 4.4 and 5.0, and FerretDB 2.x, can only drop and re-create
	// it, which needs AllowRebuild (else Up fails with ErrIndexConflict,
	// naming the server, before it changed anything).
	ExpireAfterSeconds *int32
	// Hidden hides the index from the query planner (MongoDB 4.4+). Changed
	// in place with collMod. A server without hidden indexes (FerretDB,
	// MongoDB before 4.4) fails the migration with ErrUnsupported before it
	// changed anything.
	Hidden bool
	// AllowRebuild lets the migration drop and re-create the index when it
	// exists with other keys, uniqueness, sparseness or partial filter, or
	// as a plain index that should expire documents on a server that cannot
	// make it a TTL index in place. Without it, Up fails with
	// ErrIndexConflict. While it is rebuilt the collection has no such
	// index, and no unique constraint from it. It is not part of the
	// checksum.
	AllowRebuild bool
}

// TTL returns the expireAfterSeconds for d, rounded up to whole seconds
// like lock.TTLSeconds, for Index.ExpireAfterSeconds.
func TTL(d time.Duration) *int32 {
	s := lock.TTLSeconds(d)
	return &s
}

// keyPart is one element of an index key, compared by value: 1, 1.0 and
// int64(1) are the same key.
type keyPart struct {
	Field string
	Num   float64 // when Str == ""
	Str   string
}

func (k keyPart) value() any {
	if k.Str != "" {
		return k.Str
	}
	return int32(k.Num)
}

func normalizeKeys(keys bson.D) ([]keyPart, error) {
	if len(keys) == 0 {
		return nil, errors.New("index has no keys")
	}
	seen := make(map[string]bool, len(keys))
	out := make([]keyPart, 0, len(keys))
	for _, e := range keys {
		if e.Key == "" {
			return nil, errors.New("index key has an empty field name")
		}
		if seen[e.Key] {
			return nil, fmt.Errorf("index key field %q appears twice", e.Key)
		}
		seen[e.Key] = true
		p, err := keyValue(e.Key, e.Value)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func keyValue(field string, v any) (keyPart, error) {
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int32:
		f = float64(n)
	case int64:
		f = float64(n)
	case float64:
		f = n
	case string:
		if n == "" || n == "text" {
			return keyPart{}, fmt.Errorf("index key %q: type %q is not supported", field, n)
		}
		return keyPart{Field: field, Str: n}, nil
	default:
		return keyPart{}, fmt.Errorf("index key %q: value %v (%T) is not 1, -1 or an index type", field, v, v)
	}
	if f != 1 && f != -1 {
		return keyPart{}, fmt.Errorf("index key %q: value %v is not 1 or -1", field, v)
	}
	return keyPart{Field: field, Num: f}, nil
}

func keysDoc(keys []keyPart) bson.D {
	d := make(bson.D, len(keys))
	for i, k := range keys {
		d[i] = bson.E{Key: k.Field, Value: k.value()}
	}
	return d
}

// defaultIndexName is the name MongoDB gives an index created without one.
func defaultIndexName(keys []keyPart) string {
	parts := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		v := k.Str
		if v == "" {
			v = strconv.Itoa(int(k.Num))
		}
		parts = append(parts, k.Field, v)
	}
	return strings.Join(parts, "_")
}

// indexSpec is a checked Index.
type indexSpec struct {
	Index
	keys    []keyPart
	partial string // relaxed extended JSON of PartialFilter, "" if none
}

func (ix Index) check() (indexSpec, error) {
	s := indexSpec{Index: ix}
	if !mongoutil.ValidCollectionName(ix.Collection) {
		return s, fmt.Errorf("invalid collection name %q", ix.Collection)
	}
	keys, err := normalizeKeys(ix.Keys)
	if err != nil {
		return s, err
	}
	s.keys = keys
	if s.Name == "" {
		s.Name = defaultIndexName(keys)
	}
	if s.Name == "*" || s.Name == "_id_" {
		return s, fmt.Errorf("index name %q is reserved", s.Name)
	}
	if ix.ExpireAfterSeconds != nil && *ix.ExpireAfterSeconds < 0 {
		return s, fmt.Errorf("index %q: negative expireAfterSeconds %d", s.Name, *ix.ExpireAfterSeconds)
	}
	if len(ix.PartialFilter) > 0 {
		s.partial, err = extJSON(ix.PartialFilter)
		if err != nil {
			return s, fmt.Errorf("index %q: partial filter: %w", s.Name, err)
		}
	}
	return s, nil
}

// definition lists only the options that are set, so that options added
// to Index later leave existing checksums unchanged.
func (s indexSpec) definition() string {
	d := bson.D{
		{Key: "op", Value: "ensureIndex"},
		{Key: "collection", Value: s.Collection},
		{Key: "name", Value: s.Name},
		{Key: "keys", Value: keysDoc(s.keys)},
	}
	if s.Unique {
		d = append(d, bson.E{Key: "unique", Value: true})
	}
	if s.Sparse {
		d = append(d, bson.E{Key: "sparse", Value: true})
	}
	if s.partial != "" {
		d = append(d, bson.E{Key: "partialFilterExpression", Value: s.PartialFilter})
	}
	if s.ExpireAfterSeconds != nil {
		d = append(d, bson.E{Key: "expireAfterSeconds", Value: *s.ExpireAfterSeconds})
	}
	if s.Hidden {
		d = append(d, bson.E{Key: "hidden", Value: true})
	}
	js, err := extJSON(d)
	if err != nil { // check() marshalled every part already
		panic(err)
	}
	return js
}

func extJSON(v any) (string, error) {
	b, err := bson.MarshalExtJSON(v, false, false)
	return string(b), err
}

// EnsureIndex returns a migration that makes the index ix exist as
// described:
//   - no index of that name: it is created;
//   - it exists with another expireAfterSeconds or hidden flag: changed in
//     place with collMod (a plain index made a TTL index: on MongoDB 5.1
//     or later; elsewhere as for other options, below);
//   - it exists with other keys or other unique, sparse or partial filter
//     options, or options Index cannot describe: Up fails with
//     ErrIndexConflict unless ix.AllowRebuild, which drops and re-creates it;
//   - another index has the same keys (and partial filter) under another
//     name: Up fails with ErrIndexConflict.
//
// It never drops an index other than ix.Name. Its checksum derives from
// ix, AllowRebuild excepted. Down drops the index.
//
// A bad ix is reported by New, with ErrInvalidMigration.
func EnsureIndex(version int64, ix Index) Migration {
	s, err := ix.check()
	m := Migration{
		Version:     version,
		Description: fmt.Sprintf("ensure index %q on %q", s.Name, s.Collection),
		err:         err,
	}
	if err != nil {
		return m
	}
	m.Definition = s.definition()
	m.Up = s.ensure
	m.Down = func(ctx context.Context, db *mongo.Database) error {
		return dropIndex(ctx, db.Collection(s.Collection), s.Name)
	}
	m.Explain = func(ctx context.Context, db *mongo.Database) ([]string, error) {
		existing, err := listIndexes(ctx, db.Collection(s.Collection))
		if err != nil {
			return nil, err
		}
		a := s.plan(ctx, db, existing)
		if a.err != nil {
			return nil, a.err
		}
		return a.describe(s), nil
	}
	return m
}

// DropIndex returns a migration that drops the index name from collection
// if it exists. It has no Down.
func DropIndex(version int64, collection, name string) Migration {
	m := Migration{
		Version:     version,
		Description: fmt.Sprintf("drop index %q on %q", name, collection),
	}
	switch {
	case !mongoutil.ValidCollectionName(collection):
		m.err = fmt.Errorf("invalid collection name %q", collection)
		return m
	case name == "" || name == "*" || name == "_id_":
		m.err = fmt.Errorf("invalid index name %q", name)
		return m
	}
	def, _ := extJSON(bson.D{{Key: "op", Value: "dropIndex"}, {Key: "collection", Value: collection}, {Key: "name", Value: name}})
	m.Definition = def
	m.Up = func(ctx context.Context, db *mongo.Database) error {
		return dropIndex(ctx, db.Collection(collection), name)
	}
	m.Explain = func(ctx context.Context, db *mongo.Database) ([]string, error) {
		existing, err := listIndexes(ctx, db.Collection(collection))
		if err != nil {
			return nil, err
		}
		if _, ok := existing[name]; !ok {
			return []string{fmt.Sprintf("index %q on %q does not exist: nothing to do", name, collection)}, nil
		}
		return []string{fmt.Sprintf("drop index %q on %q", name, collection)}, nil
	}
	return m
}

func dropIndex(ctx context.Context, coll *mongo.Collection, name string) error {
	err := coll.Indexes().DropOne(ctx, name)
	if hasCode(err, mongoutil.CodeIndexNotFound) || hasCode(err, mongoutil.CodeNamespaceNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("drop index %q on %q: %w", name, coll.Name(), err)
	}
	return nil
}

// existingIndex is an index as listIndexes reports it.
type existingIndex struct {
	Name          string
	Keys          []keyPart
	KeysErr       error
	Unique        bool
	Sparse        bool
	Hidden        bool
	TTL           *int64
	PartialFilter string
	// Other lists options Index does not describe, with their values.
	Other []string
}

// ignoredIndexFields carry no meaning for comparison.
var ignoredIndexFields = map[string]bool{
	"v": true, "ns": true, "background": true, "textIndexVersion": true, "2dsphereIndexVersion": true,
}

// listIndexes reads coll's indexes from the primary, whatever coll's read
// preference: what they say decides what a migration changes.
func listIndexes(ctx context.Context, coll *mongo.Collection) (map[string]existingIndex, error) {
	cur, err := mongoutil.Primary(coll).Indexes().List(ctx)
	if hasCode(err, mongoutil.CodeNamespaceNotFound) {
		return map[string]existingIndex{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list indexes of %q: %w", coll.Name(), err)
	}
	var raws []bson.Raw
	if err := cur.All(ctx, &raws); err != nil {
		return nil, fmt.Errorf("list indexes of %q: %w", coll.Name(), err)
	}
	out := make(map[string]existingIndex, len(raws))
	for _, raw := range raws {
		ix, err := parseIndex(raw)
		if err != nil {
			return nil, fmt.Errorf("list indexes of %q: %w", coll.Name(), err)
		}
		out[ix.Name] = ix
	}
	return out, nil
}

func parseIndex(raw bson.Raw) (existingIndex, error) {
	var ix existingIndex
	elems, err := raw.Elements()
	if err != nil {
		return ix, err
	}
	for _, e := range elems {
		k, v := e.Key(), e.Value()
		switch k {
		case "name":
			ix.Name, _ = v.StringValueOK()
		case "key":
			var d bson.D
			if err := bson.Unmarshal(v.Document(), &d); err != nil {
				return ix, fmt.Errorf("index key: %w", err)
			}
			ix.Keys, ix.KeysErr = normalizeKeys(d)
		case "unique":
			ix.Unique = truthy(v)
		case "sparse":
			ix.Sparse = truthy(v)
		case "hidden":
			ix.Hidden = truthy(v)
		case "expireAfterSeconds":
			if n, ok := number(v); ok {
				s := int64(n)
				ix.TTL = &s
			}
		case "partialFilterExpression":
			var d bson.D
			if err := bson.Unmarshal(v.Document(), &d); err != nil {
				return ix, fmt.Errorf("partial filter: %w", err)
			}
			ix.PartialFilter, err = extJSON(d)
			if err != nil {
				return ix, fmt.Errorf("partial filter: %w", err)
			}
		default:
			if !ignoredIndexFields[k] {
				ix.Other = append(ix.Other, fmt.Sprintf("%s=%s", k, v.String()))
			}
		}
	}
	return ix, nil
}

func number(v bson.RawValue) (float64, bool) {
	switch v.Type {
	case bson.TypeInt32:
		return float64(v.Int32()), true
	case bson.TypeInt64:
		return float64(v.Int64()), true
	case bson.TypeDouble:
		return v.Double(), true
	}
	return 0, false
}

func truthy(v bson.RawValue) bool {
	if b, ok := v.BooleanOK(); ok {
		return b
	}
	n, ok := number(v)
	return ok && n != 0
}

type actionKind int

const (
	actNone actionKind = iota
	actCreate
	actModify
	actRebuild
	actConflict
)

// action is what ensure does for an index, decided from the existing ones.
type action struct {
	kind   actionKind
	ttl    *int32 // collMod expireAfterSeconds to this
	toTTL  bool   // of a plain index: MongoDB 5.1 or later
	hidden *bool  // collMod hidden to this
	diffs  []string
	err    error
}

func (s indexSpec) decide(existing map[string]existingIndex) action {
	have, ok := existing[s.Name]
	if !ok {
		for _, other := range existing {
			if other.KeysErr == nil && slices.Equal(other.Keys, s.keys) && other.PartialFilter == s.partial {
				return action{kind: actConflict, err: fmt.Errorf(
					"%w: index %q on %q has the keys %s the migration wants for %q; a migration never drops an index it does not name: rename one of them",
					ErrIndexConflict, other.Name, s.Collection, keysString(s.keys), s.Name)}
			}
		}
		return action{kind: actCreate}
	}
	var a action
	switch {
	case have.KeysErr != nil:
		a.diffs = append(a.diffs, fmt.Sprintf("keys: %v", have.KeysErr))
	case !slices.Equal(have.Keys, s.keys):
		a.diffs = append(a.diffs, fmt.Sprintf("keys %s -> %s", keysString(have.Keys), keysString(s.keys)))
	}
	if have.Unique != s.Unique {
		a.diffs = append(a.diffs, fmt.Sprintf("unique %t -> %t", have.Unique, s.Unique))
	}
	if have.Sparse != s.Sparse {
		a.diffs = append(a.diffs, fmt.Sprintf("sparse %t -> %t", have.Sparse, s.Sparse))
	}
	if have.PartialFilter != s.partial {
		a.diffs = append(a.diffs, fmt.Sprintf("partialFilterExpression %s -> %s", orNone(have.PartialFilter), orNone(s.partial)))
	}
	for _, o := range have.Other {
		a.diffs = append(a.diffs, fmt.Sprintf("option %s is not in the migration", o))
	}
	switch {
	case s.ExpireAfterSeconds == nil && have.TTL != nil:
		// collMod cannot make a TTL index plain again.
		a.diffs = append(a.diffs, fmt.Sprintf("expireAfterSeconds %d -> none", *have.TTL))
	case s.ExpireAfterSeconds != nil && (have.TTL == nil || *have.TTL != int64(*s.ExpireAfterSeconds)):
		a.ttl, a.toTTL = s.ExpireAfterSeconds, have.TTL == nil
	}
	if have.Hidden != s.Hidden {
		h := s.Hidden
		a.hidden = &h
	}
	switch {
	case len(a.diffs) > 0 && s.AllowRebuild:
		a.kind = actRebuild
	case len(a.diffs) > 0:
		a.kind = actConflict
		a.err = fmt.Errorf("%w: index %q on %q differs from the migration (%s); only dropping and re-creating it can change that, which the migration does not allow (Index.AllowRebuild)",
			ErrIndexConflict, s.Name, s.Collection, strings.Join(a.diffs, ", "))
	case a.ttl != nil || a.hidden != nil:
		a.kind = actModify
	default:
		a.kind = actNone
	}
	return a
}

// plan is decide, told what the server can do: a plain index made a TTL
// index with collMod needs MongoDB 5.1 or later, and the server's buildInfo
// says whether it is that (one more round trip, only then).
func (s indexSpec) plan(ctx context.Context, db *mongo.Database, existing map[string]existingIndex) action {
	a := s.decide(existing)
	if a.kind != actModify || !a.toTTL {
		return a
	}
	info, err := mongoutil.ReadBuildInfo(ctx, db)
	if err != nil || ttlConvertible(info) {
		// Not told (a Stable API strict client cannot ask): collMod's
		// answer tells (ensure).
		return a
	}
	return s.noTTLConversion(a, info.String(), nil)
}

// ttlConvertible reports whether a server's collMod can give a plain index
// an expireAfterSeconds: MongoDB from 5.1 on can; 4.4 and 5.0 cannot, nor
// can FerretDB 2.x (InvalidOptions, "no expireAfterSeconds field to
// update"). FerretDB 1.x has no TTL indexes and no collMod: it is asked,
// and its refusal leaves the index plain with a warning, as for every TTL
// index there.
func ttlConvertible(info mongoutil.BuildInfo) bool {
	switch info.FerretDB {
	case 1:
		return true
	case 2:
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(info.Version, "%d.%d", &major, &minor); err != nil {
		return true // unknown: collMod tells
	}
	return major > 5 || major == 5 && minor >= 1
}

// noTTLConversion is a, a collMod making the plain index s.Name a TTL index,
// on a server that cannot (named server; refused: its answer, if it was
// asked): a rebuild if s allows one, else a conflict.
func (s indexSpec) noTTLConversion(a action, server string, refused error) action {
	diff := fmt.Sprintf("expireAfterSeconds none -> %d, which %s cannot set on an existing index (MongoDB can from 5.1 on)", *a.ttl, server)
	if s.AllowRebuild {
		return action{kind: actRebuild, hidden: a.hidden, diffs: append(a.diffs, diff)}
	}
	err := fmt.Errorf("%w: index %q on %q is a plain index and the migration makes it a TTL index (expireAfterSeconds %d), which %s cannot do in place (MongoDB can from 5.1 on): let the migration drop and re-create it (Index.AllowRebuild), or drop it before Up",
		ErrIndexConflict, s.Name, s.Collection, *a.ttl, server)
	if refused != nil {
		err = fmt.Errorf("%w: %w", err, refused)
	}
	return action{kind: actConflict, diffs: append(a.diffs, diff), err: err}
}

// ttlRefused reports whether err is a server's refusal to give a plain
// index an expireAfterSeconds (MongoDB 4.4 and 5.0, FerretDB 2.x).
func ttlRefused(ctx context.Context, err error) bool {
	var ce mongo.CommandError
	return err != nil && ctx.Err() == nil && errors.As(err, &ce) && ce.Code == mongoutil.CodeInvalidOptions &&
		strings.Contains(ce.Message, "no expireAfterSeconds field")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func keysString(keys []keyPart) string {
	s, err := extJSON(keysDoc(keys))
	if err != nil {
		return fmt.Sprint(keys)
	}
	return s
}

func (a action) describe(s indexSpec) []string {
	switch a.kind {
	case actNone:
		return []string{fmt.Sprintf("index %q on %q exists as described: nothing to do", s.Name, s.Collection)}
	case actCreate:
		return []string{fmt.Sprintf("create index %q on %q %s", s.Name, s.Collection, s.optionsString())}
	case actRebuild:
		var out []string
		if a.hidden != nil && *a.hidden {
			out = append(out, fmt.Sprintf("collMod %q: set hidden of index %q to true (before the drop: fails there if the server has no hidden indexes)", s.Collection, s.Name))
		}
		return append(out,
			fmt.Sprintf("drop index %q on %q (%s)", s.Name, s.Collection, strings.Join(a.diffs, ", ")),
			fmt.Sprintf("create index %q on %q %s", s.Name, s.Collection, s.optionsString()))
	case actModify:
		var out []string
		if a.hidden != nil {
			out = append(out, fmt.Sprintf("collMod %q: set hidden of index %q to %t", s.Collection, s.Name, *a.hidden))
		}
		switch {
		case a.toTTL:
			out = append(out, fmt.Sprintf("collMod %q: set expireAfterSeconds of index %q to %d, making a plain index a TTL index (MongoDB 5.1 or later)", s.Collection, s.Name, *a.ttl))
		case a.ttl != nil:
			out = append(out, fmt.Sprintf("collMod %q: set expireAfterSeconds of index %q to %d", s.Collection, s.Name, *a.ttl))
		}
		return out
	}
	return []string{fmt.Sprintf("fail: %v", a.err)}
}

func (s indexSpec) optionsString() string {
	parts := []string{keysString(s.keys)}
	if s.Unique {
		parts = append(parts, "unique")
	}
	if s.Sparse {
		parts = append(parts, "sparse")
	}
	if s.partial != "" {
		parts = append(parts, "partialFilterExpression "+s.partial)
	}
	if s.ExpireAfterSeconds != nil {
		parts = append(parts, fmt.Sprintf("expireAfterSeconds %d", *s.ExpireAfterSeconds))
	}
	if s.Hidden {
		parts = append(parts, "hidden")
	}
	return strings.Join(parts, " ")
}

// ensure is the Up of EnsureIndex. A step the server may not support goes
// first, so that it fails before anything changed: the hidden flag before
// expireAfterSeconds, and, for a rebuild into a hidden index, hiding the
// old index before dropping it (it goes anyway).
func (s indexSpec) ensure(ctx context.Context, db *mongo.Database) error {
	coll := db.Collection(s.Collection)
	existing, err := listIndexes(ctx, coll)
	if err != nil {
		return err
	}
	a := s.plan(ctx, db, existing)
	switch a.kind {
	case actNone:
		return nil
	case actConflict:
		return a.err
	case actCreate:
		return s.create(ctx, coll)
	case actRebuild:
		return s.rebuild(ctx, coll, a)
	}
	if a.hidden != nil {
		if err := s.setHidden(ctx, coll, *a.hidden); err != nil {
			return err
		}
	}
	if a.ttl == nil {
		return nil
	}
	err = collMod(ctx, coll, bson.D{{Key: "name", Value: s.Name}, {Key: "expireAfterSeconds", Value: *a.ttl}})
	switch {
	case unsupported(ctx, err, ""):
		zerolog.Ctx(ctx).Warn().Str("collection", s.Collection).Str("index", s.Name).Err(err).
			Msg("server does not implement changing expireAfterSeconds; the index stays as it is")
	case a.toTTL && ttlRefused(ctx, err):
		// A server plan could not ask (or that would not say): the hidden
		// flag may have changed already.
		server := "this server"
		if info, ierr := mongoutil.ReadBuildInfo(ctx, db); ierr == nil {
			server = info.String()
		}
		b := s.noTTLConversion(a, server, err)
		if b.kind == actRebuild {
			return s.rebuild(ctx, coll, b)
		}
		return b.err
	case err != nil:
		return fmt.Errorf("set expireAfterSeconds of index %q on %q to %d: %w", s.Name, s.Collection, *a.ttl, err)
	}
	return nil
}

// rebuild drops the index s.Name and creates it as s describes. Hiding it
// goes first if s hides it: a server without hidden indexes fails there,
// with the index as it was.
func (s indexSpec) rebuild(ctx context.Context, coll *mongo.Collection, a action) error {
	if a.hidden != nil && *a.hidden {
		if err := s.setHidden(ctx, coll, true); err != nil {
			return err
		}
	}
	zerolog.Ctx(ctx).Warn().Str("collection", s.Collection).Str("index", s.Name).Strs("differences", a.diffs).Msg("dropping index to re-create it")
	if err := dropIndex(ctx, coll, s.Name); err != nil {
		return err
	}
	return s.create(ctx, coll)
}

// setHidden hides or unhides the index s.Name with collMod.
func (s indexSpec) setHidden(ctx context.Context, coll *mongo.Collection, hidden bool) error {
	what := fmt.Sprintf("hide index %q on %q", s.Name, s.Collection)
	if !hidden {
		what = "un" + what
	}
	err := collMod(ctx, coll, bson.D{{Key: "name", Value: s.Name}, {Key: "hidden", Value: hidden}})
	switch {
	case unsupported(ctx, err, "hidden"):
		return &unsupportedError{what: what, feature: "hidden indexes (collMod index.hidden)", err: err}
	case err != nil:
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

func collMod(ctx context.Context, coll *mongo.Collection, index bson.D) error {
	return coll.Database().RunCommand(ctx, bson.D{{Key: "collMod", Value: coll.Name()}, {Key: "index", Value: index}}).Err()
}

func (s indexSpec) create(ctx context.Context, coll *mongo.Collection) error {
	model := func(ttl bool) mongo.IndexModel {
		o := options.Index().SetName(s.Name)
		// Only options that are set are sent: FerretDB rejects some of them
		// (hidden, partialFilterExpression) even when false or empty.
		if s.Unique {
			o.SetUnique(true)
		}
		if s.Sparse {
			o.SetSparse(true)
		}
		if s.partial != "" {
			o.SetPartialFilterExpression(s.PartialFilter)
		}
		if s.Hidden {
			o.SetHidden(true)
		}
		if ttl && s.ExpireAfterSeconds != nil {
			o.SetExpireAfterSeconds(*s.ExpireAfterSeconds)
		}
		return mongo.IndexModel{Keys: keysDoc(s.keys), Options: o}
	}
	_, err := coll.Indexes().CreateOne(ctx, model(true))
	if s.ExpireAfterSeconds != nil && unsupported(ctx, err, "") {
		zerolog.Ctx(ctx).Warn().Str("collection", s.Collection).Str("index", s.Name).Err(err).
			Msg("server does not implement TTL indexes; creating a plain index")
		_, err = coll.Indexes().CreateOne(ctx, model(false))
	}
	switch {
	case s.Hidden && unsupported(ctx, err, "hidden"):
		return &unsupportedError{what: fmt.Sprintf("create index %q on %q", s.Name, s.Collection),
			feature: "hidden indexes (createIndexes hidden)", err: err}
	case unsupported(ctx, err, ""):
		return &unsupportedError{what: fmt.Sprintf("create index %q on %q %s", s.Name, s.Collection, s.optionsString()),
			feature: "an option of this index (createIndexes)", err: err}
	case err != nil:
		return fmt.Errorf("create index %q on %q: %w", s.Name, s.Collection, err)
	}
	return nil
}

// unsupportedError is a command the server refused for want of a feature.
// It matches ErrUnsupported and the server's error.
type unsupportedError struct {
	what    string // what was being done
	feature string // what the server lacks, and the command that showed it
	err     error
}

func (e *unsupportedError) Error() string {
	return fmt.Sprintf("%s: the server does not support %s: %v", e.what, e.feature, e.err)
}

func (e *unsupportedError) Unwrap() []error { return []error{ErrUnsupported, e.err} }

// unsupported is the one place that decides whether err is a server saying
// it does not support what a command asked. NotImplemented (238) and
// CommandNotSupported (115) always say so: FerretDB 1.x's answer to collMod
// and to the index options it lacks. With about (the option asked for,
// "hidden"), so does a refusal of the command's arguments that names it:
// BadValue (2), FailedToParse (9), InvalidOptions (72) or an unknown field
// (40415) with about in its message; servers without hidden indexes
// (MongoDB before 4.4, DocumentDB) answer so, each with its own code. An
// InternalError (1) is the server failing, not refusing, unless its message
// also says "not supported": FerretDB 2.x's "'collMod.index.hidden' is not
// supported yet." and "hidden indexes are not supported yet." (PostgreSQL's
// feature_not_supported). Anything else (a full index catalog, a bad
// partial filter, a lost primary, a network error, the end of ctx) is an
// error of its own, so that a failed step after a drop is never taken for
// "nothing changed".
func unsupported(ctx context.Context, err error, about string) bool {
	var ce mongo.CommandError
	switch {
	case err == nil || ctx.Err() != nil || !errors.As(err, &ce):
		return false
	case ce.Code == mongoutil.CodeNotImplemented || ce.Code == mongoutil.CodeCommandNotSupported:
		return true
	}
	msg := strings.ToLower(ce.Message)
	switch {
	case about == "" || !strings.Contains(msg, about):
		return false
	case ce.Code == mongoutil.CodeInternalError:
		return strings.Contains(msg, "not supported")
	}
	return refusals[ce.Code]
}

// refusals are the codes a server refuses a command's arguments with.
var refusals = map[int32]bool{
	mongoutil.CodeBadValue:       true,
	mongoutil.CodeFailedToParse:  true,
	mongoutil.CodeInvalidOptions: true,
	mongoutil.CodeUnknownField:   true,
}

func hasCode(err error, code int) bool {
	var se mongo.ServerError
	return errors.As(err, &se) && se.HasErrorCode(code)
}
