package ui

import "time"

// Timeouts of the HTTP server that serves the dashboard: `mongolock ui`
// and the demo set them, and a program that mounts the Handler in its own
// http.Server should set its own, no looser (an http.Server has none by
// default: an idle keep-alive connection, or a client that never reads
// its response, holds its connection and handler for ever).
const (
	// DefaultServerReadHeaderTimeout bounds the reading of a request's
	// headers.
	DefaultServerReadHeaderTimeout = 10 * time.Second
	// DefaultServerReadTimeout bounds the reading of a whole request (an
	// action's form is at most 16 KiB).
	DefaultServerReadTimeout = 15 * time.Second
	// DefaultServerWriteTimeout bounds a request from its headers to the
	// end of its response: a page's reads (DefaultReadTimeout each) and
	// its writing to a client that reads slowly or not at all. Raise it
	// with WithReadTimeout.
	DefaultServerWriteTimeout = 3 * DefaultReadTimeout
	// DefaultServerIdleTimeout is how long a keep-alive connection may
	// wait for its next request; the pages' script asks every refresh
	// (DefaultRefresh), well within it.
	DefaultServerIdleTimeout = 30 * time.Second
)
