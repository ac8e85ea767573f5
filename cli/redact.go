package cli

import (
	"net/url"
	"regexp"
	"strings"
)

const hidden = "xxxxx"

// sensitiveOptions are URI options whose values are secrets.
var sensitiveOptions = map[string]bool{
	"authmechanismproperties":         true, // may hold AWS_SESSION_TOKEN
	"tlscertificatekeyfilepassword":   true,
	"sslclientcertificatekeypassword": true,
	"password":                        true,
}

// redactor hides the credentials of one connection string in anything
// printed: the URI itself and errors that may quote parts of it. It hides
// credentials only, whatever the string: what comes before the last '@'
// (user and password) and the values of secret options; a string that is
// not a URI at all is shown with the same parts hidden.
type redactor struct {
	raw     string   // the URI as given
	safe    string   // the URI with its secrets hidden
	secrets []string // longest first
}

func newRedactor(uri string) redactor {
	r := redactor{raw: uri}
	scheme, rest, ok := strings.Cut(uri, "://")
	if ok {
		scheme += "://"
	} else {
		scheme, rest = "", uri
	}
	// Credentials end at the last '@': cutting there hides too much rather
	// than too little when an option holds an '@'.
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		// The user name alone is not scrubbed from messages: it is no secret,
		// and a short one would garble them. The password always is.
		userinfo := rest[:at]
		r.addSecret(userinfo)
		// Past a mangled scheme ("mongodb:/u:pw@h"), if any.
		cred := userinfo[strings.LastIndex(userinfo, "/")+1:]
		if _, pass, ok := strings.Cut(cred, ":"); ok {
			r.addSecret(pass)
		}
		rest = hidden + "@" + rest[at+1:]
	}
	if base, query, ok := strings.Cut(rest, "?"); ok {
		parts := strings.FieldsFunc(query, func(c rune) bool { return c == '&' || c == ';' })
		for i, p := range parts {
			k, v, _ := strings.Cut(p, "=")
			if sensitiveOptions[strings.ToLower(k)] && v != "" {
				r.addSecret(v)
				// authMechanismProperties=AWS_SESSION_TOKEN:tok,...: each value.
				if u, err := url.QueryUnescape(v); err == nil {
					for _, prop := range strings.Split(u, ",") {
						if _, pv, ok := strings.Cut(prop, ":"); ok {
							r.addSecret(pv)
						}
					}
				}
				parts[i] = k + "=" + hidden
			}
		}
		rest = base + "?" + strings.Join(parts, "&")
	}
	r.safe = scheme + rest
	// Longest first, so that a secret containing another is hidden whole.
	for i := 1; i < len(r.secrets); i++ {
		for j := i; j > 0 && len(r.secrets[j]) > len(r.secrets[j-1]); j-- {
			r.secrets[j], r.secrets[j-1] = r.secrets[j-1], r.secrets[j]
		}
	}
	return r
}

func (r *redactor) addSecret(s string) {
	if s == "" {
		return
	}
	r.secrets = append(r.secrets, s)
	if u, err := url.PathUnescape(s); err == nil && u != s {
		r.secrets = append(r.secrets, u)
	}
	if u, err := url.QueryUnescape(s); err == nil && u != s {
		r.secrets = append(r.secrets, u)
	}
}

// uri returns the connection string with its secrets hidden.
func (r redactor) uri() string {
	if r.safe == "" {
		return "<no URI>"
	}
	return r.safe
}

var quoted = regexp.MustCompile(`"[^"]*"`)

// scrub hides the URI's secrets in s, and quoted pieces of them, which URI
// parse errors print ("invalid URL escape "%zz"").
func (r redactor) scrub(s string) string {
	if r.raw != "" {
		s = strings.ReplaceAll(s, r.raw, r.uri())
	}
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, sec, hidden)
	}
	if len(r.secrets) > 0 {
		s = quoted.ReplaceAllStringFunc(s, func(q string) string {
			inner := q[1 : len(q)-1]
			for _, sec := range r.secrets {
				if inner != "" && strings.Contains(sec, inner) {
					return `"` + hidden + `"`
				}
			}
			return q
		})
	}
	return s
}

// oneLine scrubs s and folds it onto one line.
func (r redactor) oneLine(s string) string {
	s = r.scrub(s)
	return strings.Join(strings.Fields(s), " ")
}
