package scheduler

import "testing"

// FuzzParseHistoryCursor: a cursor from a URL never panics, and one that
// parses prints back as itself.
func FuzzParseHistoryCursor(f *testing.F) {
	for _, s := range []string{"o1700000000000000000.0", "n-5.3", "o9223372036854775807.0", "x1.0", "o.", "o1.99999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseHistoryCursor(s)
		if err != nil {
			return
		}
		again, err := ParseHistoryCursor(c.String())
		if err != nil || again != c {
			t.Fatalf("%q parses as %+v, which prints as %q and parses as %+v (%v)", s, c, c.String(), again, err)
		}
	})
}
