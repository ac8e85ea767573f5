package mongoutil_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mongolock/mongolock/internal/mongotest"
	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/internal/wirefault"
)

// TestReadBuildInfo tells MongoDB, FerretDB 1.x and FerretDB 2.x apart by
// buildInfo, the test server playing the others.
func TestReadBuildInfo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	read := func(rules ...wirefault.Rule) mongoutil.BuildInfo {
		t.Helper()
		c := mongotest.NewRewrittenClient(t, rules)
		info, err := mongoutil.ReadBuildInfo(ctx, c.Database("admin"))
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	if got := read(wirefault.MongoDBVersion("5.0.26")); got != (mongoutil.BuildInfo{Version: "5.0.26"}) || got.String() != "MongoDB 5.0.26" {
		t.Errorf("MongoDB 5.0.26: %+v %q", got, got)
	}
	if got := read(wirefault.FerretDB2Version("v2.5.0")); got.FerretDB != 2 || got.FerretDBVersion != "v2.5.0" || got.String() != "FerretDB v2.5.0" {
		t.Errorf("FerretDB v2.5.0: %+v %q", got, got)
	}
	if mongotest.Backend() == mongotest.BackendFerretDB {
		if got := read(); got.FerretDB != 1 || !strings.HasPrefix(got.String(), "FerretDB ") {
			t.Errorf("embedded FerretDB: %+v %q", got, got)
		}
	}
}
