// Package hideuri hides the credentials of the URIs found in text, by
// their structure alone: the one definition behind package redact (the
// dashboard and the CLI), the health probes and the library's logs. It
// imports nothing of the module, so that every package may use it.
//
// It works by structure alone, never by knowing a secret: text is hidden
// because of where it stands in a URI (its userinfo, the value of an option
// named like a secret), so the output tells nothing about any password —
// a quoted fragment of one shows exactly as any other text does.
//
// The driver's connstring package does not fit: it parses one well-formed
// connection string (and resolves mongodb+srv names through DNS), while
// the text to redact is free text holding any number of URIs, often
// malformed ones (a raw '@' in a password is what an error quotes).
package hideuri

import (
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Hidden replaces what is hidden.
const Hidden = "***"

// scheme begins a URI: scheme://.
var scheme = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://`)

// option is a key=value pair of a query (or of text that reads like one):
// at the start of a word or after ?, & or ;, up to the next & or ;.
var option = regexp.MustCompile(`(?:^|[?&;])([^?&;=]+)=([^&;]*)`)

// secretWords name the options whose values are hidden (in their key,
// case-insensitive, once unescaped): authMechanismProperties (which holds
// AWS_SESSION_TOKEN), tlsCertificateKeyFilePassword,
// sslClientCertificateKeyPassword, and anything named password, secret,
// token or credential.
var secretWords = []string{"authmechanismproperties", "password", "passwd", "pwd", "secret", "token", "credential"}

// maxPasses bounds the passes to a fixed point (see URIs).
const maxPasses = 8

// URIs returns s with the credentials of every URI in it hidden, word by
// word (a word is a run of non-space characters):
//
//   - the userinfo of scheme://userinfo@host: everything from :// to the
//     last '@' before the query (the first '?' or '#' after the first '/'),
//     so a raw '@', '?' or '#' in a password hides too much rather than too
//     little: mongodb://carl:p@ss@h2/ becomes mongodb://***@h2/;
//   - the same part of a word with no scheme that has a ':' before its '@'
//     (user:pw@host:27017);
//   - the value of every option named like a secret (see secretWords):
//     ?authMechanismProperties=AWS_SESSION_TOKEN:… becomes
//     ?authMechanismProperties=***.
//
// Text that is not a URI is left as it is. Redacting twice changes nothing.
func URIs(s string) string {
	if !strings.ContainsAny(s, "@=") {
		return s
	}
	return fixed(s, func(s string) string {
		var b strings.Builder
		for len(s) > 0 {
			i := strings.IndexFunc(s, unicode.IsSpace)
			if i < 0 {
				i = len(s)
			}
			b.WriteString(word(s[:i]))
			s = s[i:]
			j := strings.IndexFunc(s, func(r rune) bool { return !unicode.IsSpace(r) })
			if j < 0 {
				j = len(s)
			}
			b.WriteString(s[:j])
			s = s[j:]
		}
		return b.String()
	})
}

// URI returns the connection string uri with its credentials hidden, as
// URIs would, but as one word: spaces and all (a raw space in a password
// is no end).
func URI(uri string) string {
	return fixed(uri, word)
}

// fixed applies pass to s until nothing changes: hiding a span can make
// the next span end elsewhere, and a second redaction must change nothing.
func fixed(s string, pass func(string) string) string {
	for range maxPasses {
		t := pass(s)
		if t == s {
			break
		}
		s = t
	}
	return s
}

// word redacts one word.
func word(w string) string {
	if !strings.ContainsAny(w, "@=") {
		return w
	}
	var b strings.Builder
	locs := scheme.FindAllStringIndex(w, -1)
	first := len(w)
	if len(locs) > 0 {
		first = locs[0][0]
	}
	b.WriteString(schemeless(w[:first]))
	for k, loc := range locs {
		end := len(w)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		b.WriteString(w[loc[0]:loc[1]])
		body := w[loc[1]:end]
		if at := userinfoEnd(body); at >= 0 {
			body = Hidden + body[at:]
		}
		b.WriteString(body)
	}
	return options(b.String())
}

// userinfoEnd is the index of the '@' that ends the userinfo of s, the
// part of a URI after its scheme://, or -1 if it has none.
func userinfoEnd(s string) int {
	slash := strings.IndexByte(s, '/')
	if slash < 0 {
		slash = len(s)
	}
	query := strings.IndexAny(s[slash:], "?#")
	if query < 0 {
		query = len(s)
	} else {
		query += slash
	}
	return strings.LastIndexByte(s[:query], '@')
}

// schemeless hides user:pw of user:pw@host in s, text with no scheme://.
// Leading quotes and brackets are kept: they are no part of it.
func schemeless(s string) string {
	at := userinfoEnd(s)
	if at < 0 {
		return s
	}
	start := len(s[:at]) - len(strings.TrimLeft(s[:at], "\"'`([{<"))
	if !strings.Contains(s[start:at], ":") {
		return s
	}
	return s[:start] + Hidden + s[at:]
}

// options hides the values of the options named like secrets in w.
func options(w string) string {
	if !strings.Contains(w, "=") {
		return w
	}
	ms := option.FindAllStringSubmatchIndex(w, -1)
	if ms == nil {
		return w
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		key, vs, ve := w[m[2]:m[3]], m[4], m[5]
		if !secretKey(key) || w[vs:ve] == Hidden || vs == ve {
			continue
		}
		b.WriteString(w[last:vs])
		b.WriteString(Hidden)
		last = ve
	}
	b.WriteString(w[last:])
	return b.String()
}

func secretKey(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil && utf8.ValidString(k) {
		key = k
	}
	key = strings.ToLower(key)
	for _, s := range secretWords {
		if strings.Contains(key, s) {
			return true
		}
	}
	return false
}
