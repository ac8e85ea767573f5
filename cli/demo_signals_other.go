//go:build !unix

package cli

import "os"

// demoSignals: none here (see demo_signals_unix.go).
func demoSignals() (kill, end <-chan os.Signal, stop func()) {
	return nil, nil, func() {}
}

func demoSignalHint(int) string { return "" }
