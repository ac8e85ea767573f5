package wirefault

import (
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// OrphanMatches plays a sharded cluster that counts orphaned documents: a
// multi-shard updateMany right after a chunk migration also matches the
// copies left on the donor shard (SERVER-20361), so n is too high. Replies
// to update commands that hold a multi: true statement, and for which match
// returns true (match nil: all), get extra added to n; nModified stays.
func OrphanMatches(extra int, match func(cmd bson.D) bool) Rule {
	return RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if commandName(cmd) != "update" || !hasMultiUpdate(cmd) || !isOK(reply) {
			return nil
		}
		if match != nil && !match(cmd) {
			return nil
		}
		n, ok := addInt(lookupValue(reply, "n"), extra)
		if !ok {
			return nil
		}
		return with(reply, "n", n)
	}}
}

// hasMultiUpdate reports whether an update command holds a multi: true
// statement.
func hasMultiUpdate(cmd bson.D) bool {
	updates, _ := lookupValue(cmd, "updates").(bson.A)
	return slices.ContainsFunc(updates, func(s any) bool {
		stmt, _ := s.(bson.D)
		return isTrue(lookupValue(stmt, "multi"))
	})
}

// codeDuplicateKey is MongoDB's DuplicateKey error code.
const codeDuplicateKey = 11000

// DuplicateKeyAsInternalError plays FerretDB 2.x, which reports a
// findAndModify upsert that collides with an existing _id as a PostgreSQL
// constraint violation instead of DuplicateKey:
//
//	{ok: 0, errmsg: "duplicate key value violates unique constraint \"collection_pk_5\"",
//	 code: 1, codeName: "InternalError"}
//
// It rewrites findAndModify replies that failed with code 11000, at the top
// level (MongoDB and FerretDB 1.24 both answer so) or in writeErrors. Other
// commands and other errors are untouched.
func DuplicateKeyAsInternalError() Rule {
	return RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if commandName(cmd) != "findAndModify" || !isDuplicateKey(reply) {
			return nil
		}
		return internalError(`duplicate key value violates unique constraint "collection_pk_5"`)
	}}
}

// isDuplicateKey reports whether reply failed with DuplicateKey.
func isDuplicateKey(reply bson.D) bool {
	if code, ok := toInt64(lookupValue(reply, "code")); ok && code == codeDuplicateKey {
		return true
	}
	errs, _ := lookupValue(reply, "writeErrors").(bson.A)
	return slices.ContainsFunc(errs, func(e any) bool {
		we, _ := e.(bson.D)
		code, ok := toInt64(lookupValue(we, "code"))
		return ok && code == codeDuplicateKey
	})
}
