package mongoutil

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

func TestPermanent(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"not from a server", errors.New("boom"), false},
		{"deadline", fmt.Errorf("finish: %w", context.DeadlineExceeded), false},
		{"bad value", mongo.CommandError{Code: 2, Name: "BadValue"}, true},
		{"unauthorized", fmt.Errorf("finish: %w", mongo.CommandError{Code: 13, Name: "Unauthorized"}), true},
		{"not primary", mongo.CommandError{Code: 10107, Name: "NotWritablePrimary"}, false},
		{"time limit", mongo.CommandError{Code: 50, Name: "MaxTimeMSExpired"}, false},
		{"retryable label", mongo.CommandError{Code: 2, Labels: []string{"RetryableWriteError"}}, false},
		{"network", mongo.CommandError{Code: 2, Labels: []string{"NetworkError"}}, false},
		{"write concern", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64, Name: "WriteConcernFailed"}}, false},
		{"validation", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 121, Message: "Document failed validation"}}}, true},
	} {
		if got := Permanent(tc.err); got != tc.want {
			t.Errorf("%s: Permanent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
