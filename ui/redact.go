package ui

import "github.com/mongolock/mongolock/internal/redact"

// RedactURIs hides the credentials of every URI in s: the userinfo
// (mongodb://user:pw@host becomes mongodb://***@host; it ends at the last
// '@' before the query, so mongodb://carl:p@ss@h2/ becomes
// mongodb://***@h2/), the same part of a word with no scheme
// (user:pw@host), and the values of options named like secrets
// (authMechanismProperties, which holds AWS_SESSION_TOKEN,
// tlsCertificateKeyFilePassword, and any option named password, secret,
// token or credential). It goes by the structure of the text alone, never
// by knowing a secret, so what it shows tells nothing of one; text that is
// not a URI is left as it is, and redacting twice changes nothing. Errors
// of the driver and of jobs, notes and ids can carry a connection string;
// the dashboard shows none.
func RedactURIs(s string) string {
	return redact.URIs(s)
}
