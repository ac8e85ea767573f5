package lock

import (
	"runtime"
	"testing"
	"testing/synctest"

	"github.com/jonboulle/clockwork"
)

// TestHostBootClock: on Linux a Session on the real clock reads the host's
// boot clock, which runs forward; on fake clocks, and in a synctest
// bubble, it reads none.
func TestHostBootClock(t *testing.T) {
	if bootClockOf(clockwork.NewFakeClock()) != nil {
		t.Error("a fake clock is given the host's boot clock")
	}
	synctest.Test(t, func(t *testing.T) {
		if bootClockOf(clockwork.NewRealClock()) != nil {
			t.Error("the real clock in a synctest bubble is given the host's boot clock")
		}
	})
	read := bootClockOf(clockwork.NewRealClock())
	if runtime.GOOS != "linux" {
		if read != nil {
			t.Errorf("a boot clock read on %s", runtime.GOOS)
		}
		return
	}
	if read == nil {
		t.Fatal("no boot clock on Linux")
	}
	a, b := read(), read()
	if !a.ok || !b.ok || b.at < a.at || a.at <= 0 {
		t.Fatalf("boot clock read %+v then %+v", a, b)
	}
}
