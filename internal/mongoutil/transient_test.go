package mongoutil

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"of unknown kind", errors.New("boom"), false},
		{"disconnected", fmt.Errorf("finish: %w", mongo.ErrClientDisconnected), false},
		{"deadline", fmt.Errorf("finish: %w", context.DeadlineExceeded), true},
		{"server selection", topology.ServerSelectionError{Wrapped: errors.New("no server")}, true},
		{"bad value", mongo.CommandError{Code: 2, Name: "BadValue"}, false},
		{"unauthorized", fmt.Errorf("finish: %w", mongo.CommandError{Code: 13, Name: "Unauthorized"}), false},
		{"not primary", mongo.CommandError{Code: 10107, Name: "NotWritablePrimary"}, true},
		{"time limit", mongo.CommandError{Code: 50, Name: "MaxTimeMSExpired"}, true},
		{"interrupted", mongo.CommandError{Code: 11601, Name: "Interrupted"}, true},
		{"retryable label", mongo.CommandError{Code: 2, Labels: []string{"RetryableWriteError"}}, true},
		{"network", mongo.CommandError{Code: 2, Labels: []string{"NetworkError"}}, true},
		{"write concern", mongo.WriteException{WriteConcernError: &mongo.WriteConcernError{Code: 64, Name: "WriteConcernFailed"}}, true},
		{"validation", mongo.WriteException{WriteErrors: []mongo.WriteError{{Code: 121, Message: "Document failed validation"}}}, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
