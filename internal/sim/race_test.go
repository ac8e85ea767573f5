//go:build race

package sim

// raceDetector: the race detector runs goroutines of one instant in a more
// random order, and far fewer seeds replay identically under it.
const raceDetector = true
