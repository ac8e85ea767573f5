package simdb

import (
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// collection is a collection's documents, in natural (insertion) order,
// and its indexes; only unique indexes change what writes may do.
type collection struct {
	db, coll string
	name     string // db.coll
	onChange func(c *collection, doc bson.D)
	docs     []bson.D
	indexes  []index // _id_ first
}

type index struct {
	name   string
	key    bson.D
	unique bool
	spec   bson.D // as created, for listIndexes
}

func newCollection(db, coll string, onChange func(*collection, bson.D)) *collection {
	return &collection{db: db, coll: coll, name: db + "." + coll, onChange: onChange, indexes: []index{{
		name: "_id_", key: bson.D{{Key: "_id", Value: int32(1)}}, unique: true,
		spec: bson.D{{Key: "v", Value: int32(2)}, {Key: "key", Value: bson.D{{Key: "_id", Value: int32(1)}}}, {Key: "name", Value: "_id_"}},
	}}}
}

// find returns the positions of the documents filter matches, in natural
// order.
func (c *collection) find(filter bson.D) ([]int, error) {
	var out []int
	for i, d := range c.docs {
		ok, err := match(d, filter)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, i)
		}
	}
	return out, nil
}

// keyOf is the tuple of doc's values for index ix: missing fields are null.
func keyOf(doc bson.D, ix index) bson.A {
	k := make(bson.A, len(ix.key))
	for i, f := range ix.key {
		v := lookup(doc, f.Key)
		if v == missing {
			v = nil
		}
		k[i] = v
	}
	return k
}

// keysEqual is equal(keyOf(a, ix), keyOf(b, ix)), without making them: it
// runs for every document a write might conflict with.
func keysEqual(a, b bson.D, ix index) bool {
	for _, f := range ix.key {
		va, vb := lookup(a, f.Key), lookup(b, f.Key)
		if va == missing {
			va = nil
		}
		if vb == missing {
			vb = nil
		}
		if !equal(va, vb) {
			return false
		}
	}
	return true
}

// conflict returns the duplicate key error doc would cause at position
// skip (-1 for a new document), or nil.
func (c *collection) conflict(doc bson.D, skip int) *cmdError {
	for _, ix := range c.indexes {
		if !ix.unique {
			continue
		}
		for i, other := range c.docs {
			if i != skip && keysEqual(other, doc, ix) {
				return &cmdError{Code: codeDuplicateKey, CodeName: "DuplicateKey",
					Msg: fmt.Sprintf("E11000 duplicate key error collection: %s index: %s dup key: %v", c.name, ix.name, keyOf(doc, ix))}
			}
		}
	}
	return nil
}

// insert adds doc, with an _id (first) if it has none.
func (c *collection) insert(doc bson.D) (bson.D, *cmdError) {
	doc = withIDFirst(doc)
	if err := c.conflict(doc, -1); err != nil {
		return nil, err
	}
	c.docs = append(c.docs, doc)
	c.onChange(c, doc)
	return doc, nil
}

// replace stores doc at position i, if no unique index forbids it.
func (c *collection) replace(i int, doc bson.D) *cmdError {
	if err := c.conflict(doc, i); err != nil {
		return err
	}
	c.docs[i] = doc
	c.onChange(c, doc)
	return nil
}

func (c *collection) remove(positions []int) {
	drop := make(map[int]bool, len(positions))
	for _, p := range positions {
		drop[p] = true
	}
	kept := c.docs[:0]
	for i, d := range c.docs {
		if !drop[i] {
			kept = append(kept, d)
		}
	}
	clear(c.docs[len(kept):])
	c.docs = kept
}

func withIDFirst(doc bson.D) bson.D {
	i := slices.IndexFunc(doc, func(e bson.E) bool { return e.Key == "_id" })
	switch {
	case i == 0:
		return doc
	case i < 0:
		return append(bson.D{{Key: "_id", Value: bson.NewObjectID()}}, doc...)
	}
	out := append(bson.D{doc[i]}, doc[:i]...)
	return append(out, doc[i+1:]...)
}

func (c *collection) index(name string) int {
	return slices.IndexFunc(c.indexes, func(ix index) bool { return ix.name == name })
}
