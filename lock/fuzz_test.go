package lock_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/mongolock/mongolock/lock"
)

// FuzzValidateID: ValidateID never panics, rejects exactly the ids the
// package promises to reject, and every id it accepts survives a BSON round
// trip as a document _id unchanged.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"job", "", "a\x00", "\xff", "é", strings.Repeat("a", 1025), "$where", "a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := lock.ValidateID("lockID", id)
		wantOK := id != "" && len(id) <= lock.MaxIDLength && utf8.ValidString(id) && !strings.Contains(id, "\x00")
		if wantOK != (err == nil) {
			t.Fatalf("ValidateID(%q) = %v, want ok=%v", id, err, wantOK)
		}
		if err != nil {
			if !errors.Is(err, lock.ErrInvalidArgument) || !strings.Contains(err.Error(), "lockID") {
				t.Fatalf("error %q does not wrap ErrInvalidArgument or name the argument", err)
			}
			return
		}
		raw, err := bson.Marshal(bson.D{{Key: "_id", Value: id}})
		if err != nil {
			t.Fatalf("accepted id %q does not marshal: %v", id, err)
		}
		var back struct {
			ID string `bson:"_id"`
		}
		if err := bson.Unmarshal(raw, &back); err != nil || back.ID != id {
			t.Fatalf("accepted id %q came back as %q (%v)", id, back.ID, err)
		}
	})
}
