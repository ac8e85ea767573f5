package sim

import "testing"

// The regression seeds found before candidates existed draw none, so they
// replay as they did.
func TestCandidatesSpareRegressions(t *testing.T) {
	before := []uint64{51, 142, 83, 209, 946, 34, 8, 939, 76, 670, 733, 1510, 266, 3917}
	for _, seed := range before {
		if w := Draw(seed); w.Candidates != nil {
			t.Errorf("seed %d draws candidates %+v", seed, w.Candidates)
		}
	}
	n := 0
	for seed := uint64(1); seed <= 100; seed++ {
		if Draw(seed).Candidates != nil {
			n++
		}
	}
	if n < 10 {
		t.Errorf("%d of the first 100 seeds draw candidates", n)
	}
}
