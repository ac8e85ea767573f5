package mongoutil_test

import (
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/mongolock/mongolock/internal/mongoutil"
)

// sqlstate packs a PostgreSQL SQLSTATE as PostgreSQL's MAKE_SQLSTATE does:
// six bits a character, the first in the lowest bits.
func sqlstate(s string) int {
	n := 0
	for i := len(s) - 1; i >= 0; i-- {
		n = n<<6 | int(s[i]-'0')&0x3f
	}
	return n
}

func TestDeadlockCodeIsPostgreSQLs(t *testing.T) {
	t.Parallel()
	if got := sqlstate("40P01"); got != mongoutil.CodeDeadlockDetected {
		t.Errorf("SQLSTATE 40P01 packs to %d, CodeDeadlockDetected is %d", got, mongoutil.CodeDeadlockDetected)
	}
}

func TestIsDeadlock(t *testing.T) {
	t.Parallel()
	deadlock := mongo.CommandError{Code: mongoutil.CodeDeadlockDetected, Message: "deadlock detected"}
	we := func(code int) mongo.BulkWriteError {
		return mongo.BulkWriteError{WriteError: mongo.WriteError{Code: code}}
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"the command", deadlock, true},
		{"wrapped", fmt.Errorf("acquire: %w", deadlock), true},
		{"a write of a bulk write", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we(11000), we(mongoutil.CodeDeadlockDetected)}}, true},
		{"another code", mongo.CommandError{Code: 112, Message: "WriteConflict"}, false},
		{"not a server error", errors.New("deadlock detected"), false},
	} {
		if got := mongoutil.IsDeadlock(tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOnlyWriteErrors(t *testing.T) {
	t.Parallel()
	we := func(code int) mongo.BulkWriteError {
		return mongo.BulkWriteError{WriteError: mongo.WriteError{Code: code}}
	}
	dupOrDeadlock := []func(error) bool{mongoutil.IsDuplicateKey, mongoutil.IsDeadlock}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"duplicate keys and deadlocks", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we(11000), we(mongoutil.CodeDeadlockDetected)}}, true},
		{"deadlocks", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we(mongoutil.CodeDeadlockDetected)}}, true},
		{"another write error too", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we(mongoutil.CodeDeadlockDetected), we(2)}}, false},
		{"write concern error", mongo.BulkWriteException{WriteErrors: []mongo.BulkWriteError{we(11000)},
			WriteConcernError: &mongo.WriteConcernError{Code: 64}}, false},
		// A deadlock of the whole command is no write error: nothing was written.
		{"the command", mongo.CommandError{Code: mongoutil.CodeDeadlockDetected}, false},
	} {
		if got := mongoutil.OnlyWriteErrors(tc.err, dupOrDeadlock...); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
