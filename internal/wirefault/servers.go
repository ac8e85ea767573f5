package wirefault

import (
	"strconv"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// ferretFields are the buildInfo fields that tell FerretDB from MongoDB:
// ferretdbVersion and ferretdbFeatures (1.x), a ferretdb document (2.x).
var ferretFields = []string{"ferretdbVersion", "ferretdbFeatures", "ferretdb"}

// isBuildInfo reports whether cmd is a buildInfo, however it is spelt.
func isBuildInfo(cmd bson.D) bool { return strings.EqualFold(commandName(cmd), "buildInfo") }

// MongoDBVersion plays MongoDB version v ("5.0.26") in buildInfo replies:
// version and versionArray say v, and FerretDB's own fields go. Nothing
// else changes: the server still does what it does.
func MongoDBVersion(v string) Rule {
	var arr bson.A
	for _, p := range strings.SplitN(v, ".", 3) {
		n, _ := strconv.Atoi(p)
		arr = append(arr, int32(n))
	}
	for len(arr) < 4 {
		arr = append(arr, int32(0))
	}
	return RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if !isBuildInfo(cmd) || !isOK(reply) {
			return nil
		}
		return with(with(without(reply, ferretFields...), "version", v), "versionArray", arr)
	}}
}

// FerretDB2Version plays FerretDB 2.x in buildInfo replies: a ferretdb
// document {version: v} instead of FerretDB 1.x's ferretdbVersion and
// ferretdbFeatures. Nothing else changes.
func FerretDB2Version(v string) Rule {
	return RuleFuncs{OnReply: func(cmd, reply bson.D) bson.D {
		if !isBuildInfo(cmd) || !isOK(reply) {
			return nil
		}
		return with(without(reply, ferretFields...), "ferretdb", bson.D{{Key: "version", Value: v}})
	}}
}
