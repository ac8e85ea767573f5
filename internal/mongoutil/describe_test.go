package mongoutil

import (
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestDescribe(t *testing.T) {
	deadlock := mongo.CommandError{Code: 16908292, Message: "deadlock detected"}
	dup := mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 11000, Message: "E11000 duplicate key"}}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "plain"},
		{fmt.Errorf("claim firing of 2 jobs: %w", deadlock), "claim firing of 2 jobs: " + deadlock.Error() + " (code 16908292)"},
		{dup, dup.Error()}, // its text names the code already
	} {
		if got := Describe(tc.err); got != tc.want {
			t.Errorf("Describe(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
