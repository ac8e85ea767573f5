package mongotest

import (
	"regexp"
	"strings"
	"testing"
)

func TestDatabaseName(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)
	for _, name := range []string{
		"TestX",
		"TestX/sub_test#01",
		"Test with spaces/and.dots$and\"quotes\\",
		strings.Repeat("TestLong/", 20),
		"/",
	} {
		a, b := databaseName(name), databaseName(name)
		if !valid.MatchString(a) {
			t.Errorf("databaseName(%q) = %q, not a valid name", name, a)
		}
		if a == b {
			t.Errorf("databaseName(%q) repeated %q", name, a)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"mongodb://localhost:27017/":                        "mongodb://localhost:27017/",
		"mongodb://user:secret@h1:1,h2:2/db?replicaSet=rs0": "mongodb://xxxxx@h1:1,h2:2/db?replicaSet=rs0",
		"mongodb+srv://u:p%40ss@cluster.example.net/":       "mongodb+srv://xxxxx@cluster.example.net/",
		"not a uri user:pw@host":                            "<redacted>",
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%q) = %q, want %q", in, got, want)
		}
	}
}
