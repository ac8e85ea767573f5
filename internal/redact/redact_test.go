package redact

import (
	"testing"

	"github.com/mongolock/mongolock/lock"
)

// The rule itself (URIs, URI) is tested in package hideuri.

// TestHolderValue: a value that is text is redacted as other text is; a
// binary one shows in hex, which hides nothing.
func TestHolderValue(t *testing.T) {
	t.Parallel()
	h := Holder(lock.Holder{LockID: "l", KeeperID: "k", Value: []byte("mongodb://carl:secret@h1:27017/")}, URIs)
	if got := ValueText(h.Value); got != "mongodb://***@h1:27017/" {
		t.Errorf("text value shown as %q", got)
	}
	bin := lock.Holder{Value: []byte{0x00, 0xff, 'a'}}
	if got := ValueText(Holder(bin, URIs).Value); got != "0x00ff61" {
		t.Errorf("binary value shown as %q", got)
	}
	if ValueText(nil) != "" {
		t.Error("no value shown as something")
	}
	orig := []byte("x")
	h = Holder(lock.Holder{Value: orig}, func(s string) string { return s })
	h.Value[0] = 'y'
	if orig[0] != 'x' {
		t.Error("Holder shares its value with its argument")
	}
}
