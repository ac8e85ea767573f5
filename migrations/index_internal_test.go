package migrations

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// TestUnsupportedServerAnswers: the answers servers without hidden
// indexes give (ErrUnsupported: nothing changed), each with its own code,
// and internal errors that are failures, not refusals (TestUnsupported
// has the rest).
func TestUnsupportedServerAnswers(t *testing.T) {
	t.Parallel()
	ce := func(code int32, msg string) error { return mongo.CommandError{Code: code, Message: msg} }
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		err   error
		about string
		want  bool
	}{
		{"FerretDB 1.x collMod", nil, ce(238, "collMod is not implemented yet"), "", true},
		{"FerretDB 1.x hidden build", nil, ce(238, `Index option "hidden" is not implemented yet`), "hidden", true},
		{"a command not supported", nil, ce(115, "no such command"), "", true},
		{"FerretDB 2.x collMod hidden", nil, ce(1, "'collMod.index.hidden' is not supported yet."), "hidden", true},
		{"FerretDB 2.x hidden build", nil, ce(1, "hidden indexes are not supported yet."), "hidden", true},
		{"DocumentDB hidden option", nil, ce(72, "hidden index option is not supported yet"), "hidden", true},
		{"an unknown field", nil, ce(40415, "BSON field 'collMod.index.hidden' is an unknown field."), "hidden", true},
		{"wrapped", nil, fmt.Errorf("x: %w", ce(1, "hidden indexes are not supported yet.")), "hidden", true},
		// An internal error is the server failing, not refusing, unless
		// it says it does not support the thing.
		{"an internal error naming hidden", nil, ce(1, "could not write the catalog of hidden indexes: connection lost"), "hidden", false},
		{"a refusal of something else", nil, ce(2, "bad partial filter"), "hidden", false},
		{"a refusal when nothing was asked about", nil, ce(1, "hidden indexes are not supported yet."), "", false},
		{"a network error", nil, errors.New("connection reset: hidden"), "hidden", false},
		{"an ended context", cancelled, ce(238, "collMod is not implemented yet"), "", false},
		{"nil", nil, nil, "hidden", false},
	} {
		ctx := tc.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		if got := unsupported(ctx, tc.err, tc.about); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
