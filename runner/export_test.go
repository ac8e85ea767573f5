package runner

// SetRunEnteredHook makes Run call f once it holds the runner, before its
// first campaign. Set it before Run starts.
func SetRunEnteredHook(r *LeaderAwareRunner, f func()) { r.hookRunEntered = f }
