package lock

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxIDLength is the longest lock or keeper id accepted, in bytes.
const MaxIDLength = 1024

// ValidateID reports whether id can be used as a lock or keeper id. arg names
// the argument in the error, e.g. "lockID".
func ValidateID(arg, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidArgument, arg)
	case len(id) > MaxIDLength:
		return fmt.Errorf("%w: %s is %d bytes, longer than %d", ErrInvalidArgument, arg, len(id), MaxIDLength)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalidArgument, arg)
	case strings.IndexByte(id, 0) >= 0:
		return fmt.Errorf("%w: %s contains a NUL byte", ErrInvalidArgument, arg)
	}
	return nil
}

func validateIDs(arg string, ids []string) error {
	for i, id := range ids {
		// Named only when it fails: this runs on every renewal.
		if ValidateID(arg, id) != nil {
			return ValidateID(fmt.Sprintf("%s[%d]", arg, i), id)
		}
	}
	return nil
}

// validateMany checks the arguments of the calls on several locks.
func validateMany(keeperID string, lockIDs []string) error {
	if err := ValidateID("keeperID", keeperID); err != nil {
		return err
	}
	return validateIDs("lockIDs", lockIDs)
}
