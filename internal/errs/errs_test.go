package errs_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mongolock/mongolock/internal/errs"
)

func TestKind(t *testing.T) {
	parent := errors.New("lock: invalid option")
	k := errs.Kind("runner: invalid option", parent)
	err := fmt.Errorf("%w: WithX: bad", k)
	if !errors.Is(err, k) || !errors.Is(err, parent) {
		t.Fatalf("%v matches its kind %v, its parent %v; want both", err, errors.Is(err, k), errors.Is(err, parent))
	}
	if got := err.Error(); got != "runner: invalid option: WithX: bad" {
		t.Fatalf("message %q repeats or loses a part", got)
	}
	if errors.Is(errs.Kind("other", parent), k) {
		t.Fatal("two kinds with one parent match each other")
	}
}
