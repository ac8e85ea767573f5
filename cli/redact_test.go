package cli

import (
	"strings"
	"testing"
)

// probeURI and probeNote are issue 28's: quoted fragments of the password
// in a note must show as any other fragment does, or a viewer learns the
// password by bisection.
const (
	probeURI  = "mongodb://alice:S3cretPw@127.0.0.1:27099/?authMechanism=PLAIN&authSource=$external"
	probeNote = `probe "S" "3" "q" "S3c" "XYZ" "cret" "Pw" "ice:S" "zz" "2026"`
)

func TestRedactProbeNote(t *testing.T) {
	t.Parallel()
	r := newRedactor(probeURI)
	for _, s := range []string{probeNote, `scheme must be "mongodb" or "mongodb+srv"`, "S3cretPw", "alice:S3cretPw"} {
		if got := r.oneLine(s); got != s {
			t.Errorf("oneLine(%q) = %q: text with no URI in it is changed", s, got)
		}
	}
	// Of a mangled URI, the old redactor hid the driver's own words.
	msg := `invalid URI: scheme must be "mongodb" or "mongodb+srv"`
	if got := newRedactor("mongodb:/u:pw@host").oneLine(msg); got != msg {
		t.Errorf("oneLine(%q) = %q", msg, got)
	}
	// The URI itself, in text, is hidden by its structure.
	if got := r.oneLine("dial " + probeURI + ": refused"); strings.Contains(got, "S3cretPw") || strings.Contains(got, "alice") {
		t.Errorf("oneLine kept the credentials: %q", got)
	}
}
