package scheduler_test

import (
	"os"
	"testing"

	"github.com/mongolock/mongolock/internal/mongotest"
)

func TestMain(m *testing.M) { os.Exit(mongotest.Main(m)) }
