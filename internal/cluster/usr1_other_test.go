//go:build !unix

package cluster_test

// logUSR1 does nothing: there is no SIGUSR1.
func logUSR1() {}
