// Package baddoc reads the documents of a cursor one by one, so that a
// document that is not what the module writes (lock.BadDocument) is
// skipped and named, and never fails the read of the others: the one way
// the module's readers (the term log, the migration records, the
// dashboard's actions and problems) meet a bad document.
package baddoc

import (
	"context"
	"errors"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/lock"
)

// Of describes raw, of the collection coll, that decoding found wrong
// (err): at the field the error names, or at field if it names none.
func Of(coll string, raw bson.Raw, field string, err error) lock.BadDocument {
	if de, ok := errors.AsType[*bson.DecodeError](err); ok {
		field, err = strings.Join(de.Keys(), "."), de.Unwrap()
	}
	return lock.NewBadDocument(coll, raw, field, err.Error())
}

// All decodes each document of cur, a read of the collection coll, into a
// T, in order, and returns those it cannot decode, or that check refuses
// (a field and what is wrong with it; check may be nil), as bad documents
// instead. It closes cur. The error is the read's.
func All[T any](ctx context.Context, cur *mongo.Cursor, coll string, check func(*T) (field string, err error)) ([]T, []lock.BadDocument, error) {
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var out []T
	var bad []lock.BadDocument
	for cur.Next(ctx) {
		var v T
		field, err := "", cur.Decode(&v)
		if err == nil && check != nil {
			field, err = check(&v)
		}
		if err != nil {
			bad = append(bad, Of(coll, cur.Current, field, err))
			continue
		}
		out = append(out, v)
	}
	return out, bad, cur.Err()
}
