package simdb

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/internal/mongoutil"
)

// Flavor is which server the simulation plays.
type Flavor int

const (
	// MongoDB is a replica set primary of MongoDB 7: retryable writes are
	// applied once (the retry gets the first attempt's reply), unordered
	// bulk writes go on past a failed write, and indexes take TTLs.
	MongoDB Flavor = iota
	// FerretDB1 is FerretDB 1.24 behind the serializing proxy: a retried
	// write is applied again, an unordered bulk write stops at its first
	// failed write, buildInfo reports ferretdbVersion, and collMod is not
	// implemented.
	FerretDB1
)

func (f Flavor) String() string {
	if f == FerretDB1 {
		return "FerretDB 1.24"
	}
	return "MongoDB 7"
}

// Server is an in-memory MongoDB: databases of collections of documents,
// changed one command at a time, each atomically, stamped with the
// server's clock. Clients reach it through Links. It is safe for
// concurrent use.
type Server struct {
	flavor Flavor

	mu       sync.Mutex
	offset   time.Duration // the server's clock is time.Now() plus offset
	dbs      map[string]map[string]*collection
	retried  map[txnKey]bson.D // replies of retryable writes, by session and txnNumber
	electing bool              // no primary: writes fail
	observe  func(Applied)
	changed  []Change // by the command being applied
}

// Change is a document a command wrote, as it is after the write.
type Change struct {
	DB, Coll string
	Doc      bson.D
}

type txnKey struct {
	lsid string
	txn  int64
}

// Applied is what the server did with one command, for traces and
// checkers: the command (its first element names it), the reply, and the
// server's time it took effect.
type Applied struct {
	At      time.Time
	Link    string
	Command bson.D
	Reply   bson.D
	Retried bool     // a retryable write seen before: its first reply again
	Changed []Change // documents the command inserted or changed, as they are now
}

// NewServer returns an empty server of the given flavor whose clock reads
// offset ahead of time.Now().
func NewServer(flavor Flavor, offset time.Duration) *Server {
	return &Server{flavor: flavor, offset: offset, dbs: map[string]map[string]*collection{}, retried: map[txnKey]bson.D{}}
}

// Flavor returns which server it plays.
func (s *Server) Flavor() Flavor { return s.flavor }

// Now returns the server's clock.
func (s *Server) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nowLocked()
}

func (s *Server) nowLocked() time.Time { return time.Now().Add(s.offset).Truncate(time.Millisecond) }

// StepClock moves the server's clock by d (a step back if negative), as an
// operator or NTP stepping it would, or a failover to a node whose clock
// differs.
func (s *Server) StepClock(d time.Duration) {
	s.mu.Lock()
	s.offset += d
	s.mu.Unlock()
}

// SetElecting makes the server a secondary while on is true: every write
// fails with NotWritablePrimary, as during a replica set election.
func (s *Server) SetElecting(on bool) {
	s.mu.Lock()
	s.electing = on
	s.mu.Unlock()
}

func (s *Server) isElecting() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.electing
}

// Observe sets a function called, with the server's lock held, after each
// command the server applies. It must not call the server.
func (s *Server) Observe(fn func(Applied)) {
	s.mu.Lock()
	s.observe = fn
	s.mu.Unlock()
}

// Docs returns a copy of the documents of db.coll, in natural order.
func (s *Server) Docs(db, coll string) []bson.D {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.dbs[db][coll]
	if c == nil {
		return nil
	}
	out := make([]bson.D, len(c.docs))
	for i, d := range c.docs {
		out[i] = cloneDoc(d)
	}
	return out
}

// Handle applies one command (an OP_MSG body with its document sequences
// folded in) sent by link and returns the reply.
func (s *Server) Handle(link string, cmd bson.D) bson.D {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowLocked()
	key, retryable := retryKey(cmd)
	if retryable && s.flavor == MongoDB {
		if reply, ok := s.retried[key]; ok {
			s.notify(Applied{At: now, Link: link, Command: cmd, Reply: reply, Retried: true})
			return reply
		}
	}
	s.changed = nil
	reply := s.dispatch(cmd, now)
	if retryable && s.flavor == MongoDB && okReply(reply) {
		s.retried[key] = reply
	}
	s.notify(Applied{At: now, Link: link, Command: cmd, Reply: reply, Changed: s.changed})
	s.changed = nil
	return reply
}

func (s *Server) notify(a Applied) {
	if s.observe != nil && a.Command != nil {
		s.observe(a)
	}
}

func retryKey(cmd bson.D) (txnKey, bool) {
	txn, ok := lookup(cmd, "txnNumber").(int64)
	if !ok {
		return txnKey{}, false
	}
	id, ok := lookup(cmd, "lsid.id").(bson.Binary)
	if !ok {
		return txnKey{}, false
	}
	return txnKey{lsid: string(id.Data), txn: txn}, true
}

func okReply(reply bson.D) bool {
	ok, _ := number(lookup(reply, "ok"))
	return ok == 1
}

// Time the server's documents are stamped in: milliseconds, as BSON dates.
func dateOf(t time.Time) bson.DateTime { return bson.NewDateTimeFromTime(t) }

func (s *Server) dispatch(cmd bson.D, now time.Time) (reply bson.D) {
	if len(cmd) == 0 {
		return errorReply(badValue("empty command"))
	}
	db, _ := lookup(cmd, "$db").(string)
	name := cmd[0].Key
	var res bson.D
	var err *cmdError
	write := false
	switch name {
	case "hello", "isMaster", "ismaster":
		res = s.hello(now)
	case "ping", "endSessions", "killCursors":
		res = bson.D{}
	case "buildInfo", "buildinfo":
		res = bson.D{{Key: "version", Value: "7.0.0"}, {Key: "versionArray", Value: bson.A{int32(7), int32(0), int32(0), int32(0)}}}
		if s.flavor == FerretDB1 {
			res = bson.D{{Key: "version", Value: "7.0.42"}, {Key: "ferretdbVersion", Value: "v1.24.0"}}
		}
	case "find":
		res, err = s.find(db, cmd, now)
	case "insert":
		write = true
		res, err = s.insert(db, cmd)
	case "update":
		write = true
		res, err = s.update(db, cmd, now)
	case "delete":
		write = true
		res, err = s.delete(db, cmd)
	case "findAndModify", "findandmodify":
		write = true
		res, err = s.findAndModify(db, cmd, now)
	case "createIndexes":
		write = true
		res, err = s.createIndexes(db, cmd)
	case "listIndexes":
		res, err = s.listIndexes(db, cmd)
	case "dropIndexes":
		write = true
		res, err = s.dropIndexes(db, cmd)
	case "collMod":
		write = true
		res, err = s.collMod(db, cmd)
	case "drop":
		write = true
		coll, _ := cmd[0].Value.(string)
		delete(s.dbs[db], coll)
		res = bson.D{}
	case "dropDatabase":
		write = true
		delete(s.dbs, db)
		res = bson.D{}
	case "create":
		write = true
		coll, _ := cmd[0].Value.(string)
		s.coll(db, coll, true)
		res = bson.D{}
	default:
		err = &cmdError{Code: codeCommandNotFound, CodeName: "CommandNotFound", Msg: fmt.Sprintf("no such command: '%s'", name)}
	}
	if write && s.electing {
		return errorReply(&cmdError{Code: codeNotWritablePrimary, CodeName: "NotWritablePrimary", Msg: "not primary"})
	}
	if err != nil {
		return errorReply(err)
	}
	return append(res, bson.E{Key: "ok", Value: 1.0})
}

func errorReply(err *cmdError) bson.D {
	return bson.D{{Key: "ok", Value: 0.0}, {Key: "errmsg", Value: err.Msg}, {Key: "code", Value: err.Code}, {Key: "codeName", Value: err.CodeName}}
}

func (s *Server) hello(now time.Time) bson.D {
	return bson.D{
		{Key: "isWritablePrimary", Value: !s.electing}, {Key: "ismaster", Value: !s.electing},
		{Key: "setName", Value: "rs0"}, {Key: "hosts", Value: bson.A{"sim:27017"}},
		{Key: "maxBsonObjectSize", Value: int32(16 << 20)}, {Key: "maxMessageSizeBytes", Value: int32(48000000)},
		{Key: "maxWriteBatchSize", Value: int32(100000)}, {Key: "localTime", Value: dateOf(now)},
		{Key: "logicalSessionTimeoutMinutes", Value: int32(30)}, {Key: "minWireVersion", Value: int32(0)},
		{Key: "maxWireVersion", Value: int32(21)},
	}
}

// coll returns db.name, made if make is set (nil otherwise when missing).
func (s *Server) coll(db, name string, make bool) *collection {
	cs := s.dbs[db]
	if cs == nil {
		if !make {
			return nil
		}
		cs = map[string]*collection{}
		s.dbs[db] = cs
	}
	c := cs[name]
	if c == nil && make {
		c = newCollection(db, name, func(c *collection, d bson.D) {
			if s.observe != nil {
				s.changed = append(s.changed, Change{DB: c.db, Coll: c.coll, Doc: cloneDoc(d)})
			}
		})
		cs[name] = c
	}
	return c
}

func (s *Server) find(db string, cmd bson.D, now time.Time) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	filter, _ := lookup(cmd, "filter").(bson.D)
	filter, _ = mongoutil.ResolveDeadlines(filter, now)
	var docs []bson.D
	if c := s.coll(db, name, false); c != nil {
		pos, err := c.find(filter)
		if err != nil {
			return nil, asCmdError(err)
		}
		for _, p := range pos {
			docs = append(docs, c.docs[p])
		}
	}
	if sortSpec, ok := lookup(cmd, "sort").(bson.D); ok && len(sortSpec) > 0 {
		docs = slices.Clone(docs)
		sort.SliceStable(docs, func(i, k int) bool {
			for _, f := range sortSpec {
				c := compare(normalize(lookup(docs[i], f.Key)), normalize(lookup(docs[k], f.Key)))
				if n, _ := number(f.Value); n < 0 {
					c = -c
				}
				if c != 0 {
					return c < 0
				}
			}
			return false
		})
	}
	if skip, ok := asInt64(lookup(cmd, "skip")); ok && skip > 0 {
		docs = docs[min(int(skip), len(docs)):]
	}
	if limit, ok := asInt64(lookup(cmd, "limit")); ok && limit != 0 {
		if limit < 0 {
			limit = -limit
		}
		docs = docs[:min(int(limit), len(docs))]
	}
	proj, _ := lookup(cmd, "projection").(bson.D)
	batch := make(bson.A, len(docs))
	for i, d := range docs {
		batch[i] = project(d, proj)
	}
	return bson.D{{Key: "cursor", Value: bson.D{
		{Key: "firstBatch", Value: batch}, {Key: "id", Value: int64(0)}, {Key: "ns", Value: db + "." + name},
	}}}, nil
}

// normalize makes a missing field sort as null.
func normalize(v any) any {
	if v == missing {
		return nil
	}
	return v
}

// project applies an inclusion or exclusion projection of top-level
// fields.
func project(d bson.D, proj bson.D) bson.D {
	d = cloneDoc(d)
	if len(proj) == 0 {
		return d
	}
	include := false
	for _, p := range proj {
		if p.Key != "_id" && truthy(p.Value) {
			include = true
		}
	}
	want := func(k string) bool {
		for _, p := range proj {
			if p.Key == k {
				return truthy(p.Value)
			}
		}
		if k == "_id" {
			return true
		}
		return !include
	}
	out := bson.D{}
	for _, e := range d {
		if want(e.Key) {
			out = append(out, e)
		}
	}
	return out
}

func asCmdError(err error) *cmdError {
	if ce, ok := err.(*cmdError); ok {
		return ce
	}
	return &cmdError{Code: codeInternalError, CodeName: "InternalError", Msg: err.Error()}
}

// writeError is one failed statement of a write command.
func writeError(i int, err *cmdError) bson.D {
	return bson.D{{Key: "index", Value: int32(i)}, {Key: "code", Value: err.Code}, {Key: "errmsg", Value: err.Msg}}
}

// ordered reports whether a write command stops at its first failed
// statement: ordered ones do, and FerretDB 1.24's unordered ones too.
func (s *Server) ordered(cmd bson.D) bool {
	o, ok := lookup(cmd, "ordered").(bool)
	return !ok || o || s.flavor == FerretDB1
}

func (s *Server) insert(db string, cmd bson.D) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	docs, _ := lookup(cmd, "documents").(bson.A)
	c := s.coll(db, name, true)
	n := 0
	var errs bson.A
	for i, x := range docs {
		d, ok := x.(bson.D)
		if !ok {
			return nil, badValue("documents must be objects")
		}
		if _, err := c.insert(cloneDoc(d)); err != nil {
			errs = append(errs, writeError(i, err))
			if s.ordered(cmd) {
				break
			}
			continue
		}
		n++
	}
	res := bson.D{{Key: "n", Value: int32(n)}}
	if len(errs) > 0 {
		res = append(res, bson.E{Key: "writeErrors", Value: errs})
	}
	return res, nil
}

// updateOne applies one update statement to c at now and returns how many
// documents it matched and changed, and the _id it upserted, if any.
func (s *Server) updateOne(c *collection, filter bson.D, update any, multi, upsert bool, now time.Time) (matched, modified int, upserted any, err *cmdError) {
	filter, _ = mongoutil.ResolveDeadlines(filter, now)
	pos, ferr := c.find(filter)
	if ferr != nil {
		return 0, 0, nil, asCmdError(ferr)
	}
	if !multi && len(pos) > 1 {
		pos = pos[:1]
	}
	for _, p := range pos {
		out, changed, uerr := applyUpdate(c.docs[p], update, now, false)
		if uerr != nil {
			return matched, modified, nil, asCmdError(uerr)
		}
		matched++
		if !changed {
			continue
		}
		if e := c.replace(p, out); e != nil {
			return matched, modified, nil, e
		}
		modified++
	}
	if len(pos) > 0 || !upsert {
		return matched, modified, nil, nil
	}
	doc, _, uerr := applyUpdate(upsertBase(filter), update, now, true)
	if uerr != nil {
		return 0, 0, nil, asCmdError(uerr)
	}
	doc, e := c.insert(doc)
	if e != nil {
		return 0, 0, nil, e
	}
	return 0, 0, lookup(doc, "_id"), nil
}

func (s *Server) update(db string, cmd bson.D, now time.Time) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	stmts, _ := lookup(cmd, "updates").(bson.A)
	c := s.coll(db, name, true)
	n, nModified := 0, 0
	var upserted, errs bson.A
	for i, x := range stmts {
		st, _ := x.(bson.D)
		filter, _ := lookup(st, "q").(bson.D)
		multi, _ := lookup(st, "multi").(bool)
		upsert, _ := lookup(st, "upsert").(bool)
		m, mod, id, err := s.updateOne(c, filter, lookup(st, "u"), multi, upsert, now)
		n += m
		nModified += mod
		if err != nil {
			errs = append(errs, writeError(i, err))
			if s.ordered(cmd) {
				break
			}
			continue
		}
		if id != nil {
			n++
			upserted = append(upserted, bson.D{{Key: "index", Value: int32(i)}, {Key: "_id", Value: id}})
		}
	}
	res := bson.D{{Key: "n", Value: int32(n)}, {Key: "nModified", Value: int32(nModified)}}
	if len(upserted) > 0 {
		res = append(res, bson.E{Key: "upserted", Value: upserted})
	}
	if len(errs) > 0 {
		res = append(res, bson.E{Key: "writeErrors", Value: errs})
	}
	return res, nil
}

func (s *Server) delete(db string, cmd bson.D) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	stmts, _ := lookup(cmd, "deletes").(bson.A)
	c := s.coll(db, name, false)
	n := 0
	for _, x := range stmts {
		if c == nil {
			break
		}
		st, _ := x.(bson.D)
		filter, _ := lookup(st, "q").(bson.D)
		pos, err := c.find(filter)
		if err != nil {
			return nil, asCmdError(err)
		}
		if limit, _ := asInt64(lookup(st, "limit")); limit == 1 && len(pos) > 1 {
			pos = pos[:1]
		}
		c.remove(pos)
		n += len(pos)
	}
	return bson.D{{Key: "n", Value: int32(n)}}, nil
}

func (s *Server) findAndModify(db string, cmd bson.D, now time.Time) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	filter, _ := lookup(cmd, "query").(bson.D)
	filter, _ = mongoutil.ResolveDeadlines(filter, now)
	c := s.coll(db, name, true)
	pos, ferr := c.find(filter)
	if ferr != nil {
		return nil, asCmdError(ferr)
	}
	if sortSpec, ok := lookup(cmd, "sort").(bson.D); ok && len(sortSpec) > 0 && len(pos) > 1 {
		return nil, badValue("findAndModify with sort over several documents is not simulated")
	}
	returnNew, _ := lookup(cmd, "new").(bool)
	proj, _ := lookup(cmd, "fields").(bson.D)
	if remove, _ := lookup(cmd, "remove").(bool); remove {
		if len(pos) == 0 {
			return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(0)}}}, {Key: "value", Value: nil}}, nil
		}
		old := c.docs[pos[0]]
		c.remove(pos[:1])
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}}}, {Key: "value", Value: project(old, proj)}}, nil
	}
	update := lookup(cmd, "update")
	if len(pos) > 0 {
		old := c.docs[pos[0]]
		out, changed, uerr := applyUpdate(old, update, now, false)
		if uerr != nil {
			return nil, asCmdError(uerr)
		}
		if changed {
			if e := c.replace(pos[0], out); e != nil {
				return nil, e
			}
		}
		value := old
		if returnNew {
			value = out
		}
		return bson.D{
			{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: true}}},
			{Key: "value", Value: project(value, proj)},
		}, nil
	}
	if upsert, _ := lookup(cmd, "upsert").(bool); !upsert {
		return bson.D{{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(0)}, {Key: "updatedExisting", Value: false}}}, {Key: "value", Value: nil}}, nil
	}
	doc, _, uerr := applyUpdate(upsertBase(filter), update, now, true)
	if uerr != nil {
		return nil, asCmdError(uerr)
	}
	doc, e := c.insert(doc)
	if e != nil {
		return nil, e
	}
	var value any
	if returnNew {
		value = project(doc, proj)
	}
	return bson.D{
		{Key: "lastErrorObject", Value: bson.D{{Key: "n", Value: int32(1)}, {Key: "updatedExisting", Value: false}, {Key: "upserted", Value: lookup(doc, "_id")}}},
		{Key: "value", Value: value},
	}, nil
}

// indexOptions are the options of an index spec that define it, beyond
// its key and name.
func indexOptions(spec bson.D) bson.D {
	var out bson.D
	for _, e := range spec {
		switch e.Key {
		case "key", "name", "v", "ns", "background":
		default:
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Key < out[k].Key })
	return out
}

func (s *Server) createIndexes(db string, cmd bson.D) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	specs, _ := lookup(cmd, "indexes").(bson.A)
	c := s.coll(db, name, true)
	before := len(c.indexes)
	for _, x := range specs {
		spec, _ := x.(bson.D)
		key, _ := lookup(spec, "key").(bson.D)
		ixName, _ := lookup(spec, "name").(string)
		if len(key) == 0 || ixName == "" {
			return nil, badValue("index spec needs a key and a name")
		}
		if _, ok := lookup(spec, "expireAfterSeconds").(int32); ok && s.flavor == FerretDB1 {
			return nil, &cmdError{Code: 238, CodeName: "NotImplemented", Msg: "createIndexes: TTL indexes are not implemented yet"}
		}
		opts := indexOptions(spec)
		conflict := false
		for _, ix := range c.indexes {
			sameName, sameKey := ix.name == ixName, equal(ix.key, key)
			sameOpts := equal(indexOptions(ix.spec), opts)
			switch {
			case sameName && sameKey && sameOpts:
				conflict = true // exists: nothing to do
			case sameName && !sameKey:
				return nil, &cmdError{Code: codeIndexKeySpecsConflct, CodeName: "IndexKeySpecsConflict",
					Msg: fmt.Sprintf("An existing index has the same name as the requested index. Requested index: %v, existing index: %v", spec, ix.spec)}
			case sameKey && !sameOpts || sameKey && !sameName:
				return nil, &cmdError{Code: codeIndexOptionsConflict, CodeName: "IndexOptionsConflict",
					Msg: fmt.Sprintf("An equivalent index already exists with a different name or options. Requested index: %v, existing index: %v", spec, ix.spec)}
			}
		}
		if conflict {
			continue
		}
		unique, _ := lookup(spec, "unique").(bool)
		ix := index{name: ixName, key: cloneDoc(key), unique: unique,
			spec: append(bson.D{{Key: "v", Value: int32(2)}}, cloneDoc(spec)...)}
		if unique {
			seen := bson.A{}
			for _, d := range c.docs {
				k := keyOf(d, ix)
				for _, o := range seen {
					if equal(o, k) {
						return nil, &cmdError{Code: codeDuplicateKey, CodeName: "DuplicateKey", Msg: "E11000 duplicate key error collection: " + c.name + " index: " + ixName}
					}
				}
				seen = append(seen, k)
			}
		}
		c.indexes = append(c.indexes, ix)
	}
	return bson.D{{Key: "numIndexesBefore", Value: int32(before)}, {Key: "numIndexesAfter", Value: int32(len(c.indexes))}}, nil
}

func (s *Server) listIndexes(db string, cmd bson.D) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	c := s.coll(db, name, false)
	if c == nil {
		return nil, &cmdError{Code: codeNamespaceNotFound, CodeName: "NamespaceNotFound", Msg: "ns does not exist: " + db + "." + name}
	}
	batch := bson.A{}
	for _, ix := range c.indexes {
		batch = append(batch, cloneDoc(ix.spec))
	}
	return bson.D{{Key: "cursor", Value: bson.D{
		{Key: "firstBatch", Value: batch}, {Key: "id", Value: int64(0)}, {Key: "ns", Value: db + "." + name},
	}}}, nil
}

func (s *Server) dropIndexes(db string, cmd bson.D) (bson.D, *cmdError) {
	name, _ := cmd[0].Value.(string)
	c := s.coll(db, name, false)
	if c == nil {
		return nil, &cmdError{Code: codeNamespaceNotFound, CodeName: "NamespaceNotFound", Msg: "ns not found " + db + "." + name}
	}
	ixName, _ := lookup(cmd, "index").(string)
	i := c.index(ixName)
	if i <= 0 {
		return nil, &cmdError{Code: codeIndexNotFound, CodeName: "IndexNotFound", Msg: "index not found with name [" + ixName + "]"}
	}
	c.indexes = slices.Delete(c.indexes, i, i+1)
	return bson.D{{Key: "nIndexesWas", Value: int32(len(c.indexes) + 1)}}, nil
}

func (s *Server) collMod(db string, cmd bson.D) (bson.D, *cmdError) {
	if s.flavor == FerretDB1 {
		return nil, &cmdError{Code: codeCommandNotFound, CodeName: "CommandNotFound", Msg: "no such command: 'collMod'"}
	}
	name, _ := cmd[0].Value.(string)
	c := s.coll(db, name, false)
	if c == nil {
		return nil, &cmdError{Code: codeNamespaceNotFound, CodeName: "NamespaceNotFound", Msg: "ns does not exist"}
	}
	mod, _ := lookup(cmd, "index").(bson.D)
	ixName, _ := lookup(mod, "name").(string)
	i := c.index(ixName)
	if i < 0 {
		return nil, &cmdError{Code: codeIndexNotFound, CodeName: "IndexNotFound", Msg: "cannot find index " + ixName}
	}
	res := bson.D{}
	for _, e := range mod {
		switch e.Key {
		case "name", "keyPattern":
		case "expireAfterSeconds", "hidden":
			old := lookup(c.indexes[i].spec, e.Key)
			c.indexes[i].spec = setPath(c.indexes[i].spec, e.Key, clone(e.Value))
			if old != missing {
				res = append(res, bson.E{Key: e.Key + "_old", Value: old})
			}
			res = append(res, bson.E{Key: e.Key + "_new", Value: e.Value})
		default:
			return nil, &cmdError{Code: codeInvalidOptions, CodeName: "InvalidOptions", Msg: "unknown collMod index option " + e.Key}
		}
	}
	return res, nil
}

// sortedNames lists a map's keys in order, for deterministic output.
func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var _ = strings.HasPrefix
