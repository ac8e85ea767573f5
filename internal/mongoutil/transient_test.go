package mongoutil

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

func TestNotSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"server selection", fmt.Errorf("count: %w", topology.ServerSelectionError{Wrapped: errors.New("no server")}), true},
		{"pool checkout", fmt.Errorf("count: %w", topology.WaitQueueTimeoutError{Wrapped: context.DeadlineExceeded}), true},
		{"deadline too near to send", fmt.Errorf("update: calculated server-side timeout (0 ms) is less than or equal to 0: %w", driver.ErrDeadlineWouldBeExceeded), true},
		{"deadline after sending", fmt.Errorf("count: %w", context.DeadlineExceeded), false},
		{"network", mongo.CommandError{Code: 2, Labels: []string{"NetworkError"}}, false},
	} {
		if got := NotSent(tc.err); got != tc.want {
			t.Errorf("%s: NotSent(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

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
