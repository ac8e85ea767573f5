package ui

import "regexp"

// userinfo matches the credentials of a URI: scheme://user:password@.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@"'<>]*@`)

// RedactURIs hides the credentials of every URI in s (mongodb://user:pw@host
// becomes mongodb://***@host). Errors of the driver and of jobs can carry
// a connection string; the dashboard shows none.
func RedactURIs(s string) string {
	return userinfo.ReplaceAllString(s, "${1}***@")
}
