package simdb

import (
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// match reports whether doc matches filter, with MongoDB's semantics for
// the operators this module uses: equality (also with an element of an
// array field), $eq, $ne, $gt, $gte, $lt, $lte (within one type bracket),
// $in, $nin, $exists, $not, $and, $or, $nor. Any other operator is an
// error, so that a query the simulation does not understand fails loudly
// instead of matching wrongly.
func match(doc, filter bson.D) (bool, error) {
	for _, e := range filter {
		ok, err := matchElem(doc, e)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func matchElem(doc bson.D, e bson.E) (bool, error) {
	switch e.Key {
	case "$and", "$or", "$nor":
		arr, ok := e.Value.(bson.A)
		if !ok || len(arr) == 0 {
			return false, badValue("%s must be a nonempty array", e.Key)
		}
		for _, c := range arr {
			sub, ok := c.(bson.D)
			if !ok {
				return false, badValue("%s entries must be objects", e.Key)
			}
			m, err := match(doc, sub)
			if err != nil {
				return false, err
			}
			switch {
			case e.Key == "$and" && !m:
				return false, nil
			case e.Key == "$or" && m:
				return true, nil
			case e.Key == "$nor" && m:
				return false, nil
			}
		}
		return e.Key != "$or", nil
	case "$comment":
		return true, nil
	}
	if strings.HasPrefix(e.Key, "$") {
		return false, badValue("unknown top level operator: %s", e.Key)
	}
	v := lookup(doc, e.Key)
	if ops, ok := operators(e.Value); ok {
		return matchOps(v, ops)
	}
	return matchEq(v, e.Value), nil
}

// operators returns the operator document v is, if it is one: a document
// whose first field begins with $.
func operators(v any) (bson.D, bool) {
	d, ok := v.(bson.D)
	if !ok || len(d) == 0 || !strings.HasPrefix(d[0].Key, "$") {
		return nil, false
	}
	return d, true
}

// matchEq is {field: want}: v equals want, or v is an array with an element
// equal to want; a null want matches a missing field.
func matchEq(v, want any) bool {
	if want == nil {
		if v == missing || v == nil {
			return true
		}
	}
	if equal(v, want) {
		return true
	}
	if arr, ok := v.(bson.A); ok {
		for _, x := range arr {
			if equal(x, want) {
				return true
			}
		}
	}
	return false
}

func matchOps(v any, ops bson.D) (bool, error) {
	for _, op := range ops {
		ok, err := matchOp(v, op)
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

func matchOp(v any, op bson.E) (bool, error) {
	switch op.Key {
	case "$eq":
		return matchEq(v, op.Value), nil
	case "$ne":
		return !matchEq(v, op.Value), nil
	case "$gt", "$gte", "$lt", "$lte":
		return compareOp(v, op.Key, op.Value), nil
	case "$in", "$nin":
		arr, ok := op.Value.(bson.A)
		if !ok {
			return false, badValue("%s needs an array", op.Key)
		}
		in := false
		for _, want := range arr {
			if matchEq(v, want) {
				in = true
				break
			}
		}
		return in == (op.Key == "$in"), nil
	case "$exists":
		want := truthy(op.Value)
		return (v != missing) == want, nil
	case "$not":
		sub, ok := operators(op.Value)
		if !ok {
			return false, badValue("$not needs an operator document")
		}
		m, err := matchOps(v, sub)
		return !m, err
	}
	return false, badValue("unknown operator: %s", op.Key)
}

// compareOp is $gt and its kin: only values of the same type bracket
// compare (a date never matches {$lt: 5}); an array matches if an element
// does.
func compareOp(v any, op string, want any) bool {
	if arr, ok := v.(bson.A); ok {
		for _, x := range arr {
			if compareOp(x, op, want) {
				return true
			}
		}
		return false
	}
	if v == missing || typeOrder(v) != typeOrder(want) {
		return false
	}
	c := compare(v, want)
	switch op {
	case "$gt":
		return c > 0
	case "$gte":
		return c >= 0
	case "$lt":
		return c < 0
	}
	return c <= 0
}

func truthy(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case nil:
		return false
	}
	if n, ok := number(v); ok {
		return n != 0
	}
	return true
}

// cmdError is a command's failure, as a server reports it.
type cmdError struct {
	Code     int32
	CodeName string
	Msg      string
}

func (e *cmdError) Error() string { return fmt.Sprintf("(%s) %s", e.CodeName, e.Msg) }

func badValue(format string, args ...any) *cmdError {
	return &cmdError{Code: 2, CodeName: "BadValue", Msg: fmt.Sprintf(format, args...)}
}

// Error codes the simulation answers with.
const (
	codeDuplicateKey         = 11000
	codeNamespaceNotFound    = 26
	codeIndexNotFound        = 27
	codeCommandNotFound      = 59
	codeIndexOptionsConflict = 85
	codeIndexKeySpecsConflct = 86
	codeNotWritablePrimary   = 10107
	codeMaxTimeMSExpired     = 50
	codeInvalidOptions       = 72
	codeInternalError        = 1
)
