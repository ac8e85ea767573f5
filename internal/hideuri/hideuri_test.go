package hideuri

import (
	"strings"
	"testing"
	"unicode"

	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/connstring"
)

func TestURIs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"mongodb://alice:S3cretPw@127.0.0.1:27099/?authMechanism=PLAIN&authSource=$external",
			"mongodb://***@127.0.0.1:27099/?authMechanism=PLAIN&authSource=$external"},
		// A raw '@' in the password: the userinfo ends at the last '@'.
		{"mongodb://carl:p@ss@h2/", "mongodb://***@h2/"},
		{"dial mongodb+srv://u:p%40ss@h.example/db and http://x@y/", "dial mongodb+srv://***@h.example/db and http://***@y/"},
		{"mongodb://u:p?ss@h/db", "mongodb://***@h/db"},
		{"mongodb://u:p#ss@h/db", "mongodb://***@h/db"},
		{"mongodb://u:pa/ss@h/?x=1", "mongodb://***@h/?x=1"},
		{"mongodb://u:p ss@h/", "mongodb://u:p ss@h/"}, // two words, neither a URI's userinfo: see URI
		{"mongodb://h1,h2/db?appName=me@laptop&replicaSet=rs", "mongodb://h1,h2/db?appName=me@laptop&replicaSet=rs"},
		{"mongodb://[::1]:27017,u:pw@h/", "mongodb://***@h/"},
		// Options named like secrets.
		{"mongodb+srv://u:pw@c.example.com/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tok123",
			"mongodb+srv://***@c.example.com/?authMechanism=MONGODB-AWS&authMechanismProperties=***"},
		{"mongodb://h/?tlsCertificateKeyFilePassword=kfp&tls=true", "mongodb://h/?tlsCertificateKeyFilePassword=***&tls=true"},
		{"mongodb://h/?sslClientCertificateKeyPassword=k;w=1", "mongodb://h/?sslClientCertificateKeyPassword=***;w=1"},
		{"mongodb://h/?password=x&AUTHMECHANISMPROPERTIES=SERVICE_NAME:s&tls%50assword=y", "mongodb://h/?password=***&AUTHMECHANISMPROPERTIES=***&tls%50assword=***"},
		{"mongodb://h/?authMechanismProperties=TOKEN:a@b", "mongodb://h/?authMechanismProperties=***"},
		{"--password=hunter2 token=abc x=y", "--password=*** token=*** x=y"},
		// No scheme.
		{"u:pw@host:27017/db", "***@host:27017/db"},
		{"mongodb:/u:pw@host", "***@host"},
		{`note "alice:pw@h" (bob:x@y)`, `note "***@h" (***@y)`},
		{"mail bob@example.com at 10:30", "mail bob@example.com at 10:30"},
		// Not URIs at all.
		{`probe "S" "3" "q" "S3c" "XYZ" "cret" "Pw" "ice:S" "zz" "2026"`, `probe "S" "3" "q" "S3c" "XYZ" "cret" "Pw" "ice:S" "zz" "2026"`},
		{`scheme must be "mongodb" or "mongodb+srv"`, `scheme must be "mongodb" or "mongodb+srv"`},
		{"@every 1h", "@every 1h"},
		{"scheduler/@instance/jobs/host-1:4242", "scheduler/@instance/jobs/host-1:4242"},
		{"scheduler/@instance/jobs/mongodb://k:pw@h", "scheduler/@instance/jobs/mongodb://***@h"},
		{"", ""},
	} {
		if got := URIs(tt.in); got != tt.want {
			t.Errorf("URIs(%q)\n = %q\nwant %q", tt.in, got, tt.want)
		}
		if got := URIs(URIs(tt.in)); got != URIs(tt.in) {
			t.Errorf("URIs(%q) twice = %q", tt.in, got)
		}
	}
	if got := URI("mongodb://u:p ss@h/"); got != "mongodb://***@h/" {
		t.Errorf("URI: %q", got)
	}
}

// TestURIsHidesWhatTheDriverReads: of every connection string the driver
// parses, neither the password nor the mechanism's properties survive.
func TestURIsHidesWhatTheDriverReads(t *testing.T) {
	t.Parallel()
	for _, uri := range seeds {
		cs, err := connstring.Parse(uri)
		if err != nil || strings.HasPrefix(uri, "mongodb+srv") {
			continue
		}
		out := URIs(uri)
		if cs.Password != "" && strings.Contains(out, cs.Password) {
			t.Errorf("URIs(%q) = %q keeps the password", uri, out)
		}
		for k, v := range cs.AuthMechanismProperties {
			if strings.Contains(out, v) {
				t.Errorf("URIs(%q) = %q keeps property %s", uri, out, k)
			}
		}
	}
}

var seeds = []string{
	"mongodb://alice:S3cretPw@127.0.0.1:27099/?authMechanism=PLAIN&authSource=$external",
	"mongodb://carl:p@ss@h2/",
	"mongodb://u:p%40ss@h1:27017,h2/db?replicaSet=rs",
	"mongodb://u:pw@h/?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:tok123",
	"mongodb://h/?tlsCertificateKeyFilePassword=kfp",
	"mongodb://u:p?ss@h/db",
	"mongodb://u:pa/ss@h/?x=1",
	"u:pw@host:27017/db",
	`probe "S" "3" "q" "S3c" "XYZ" "cret" "Pw" "ice:S" "zz" "2026"`,
}

// FuzzURIs: a password and a secret option's value, in a URI among any
// text, never survive, and redacting twice changes nothing. The
// promise's limits are the input's: no space in the credentials (they end
// a word), no "://" in them, no '?' or '#' after a '/' (the query would
// begin there).
func FuzzURIs(f *testing.F) {
	f.Add("before", "alice", "S3cretPw", "127.0.0.1:27099", "AWS_SESSION_TOKEN:tok", "after")
	f.Add(`"`, "carl", "p@ss", "h2", "x@y", `"`)
	f.Add("probe", "u", "p?ss#", "h1,h2", "", `"S3c" "cret"`)
	f.Add("", "", "pa/ss", "h", "a=b", "mongodb://x:y@z/?password=w")
	f.Add("u:pw@", "a:b", "c", "[::1]", ";&", "?")
	f.Fuzz(func(t *testing.T, before, user, pass, host, value, after string) {
		out := URIs(before)
		if again := URIs(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", before, out, again)
		}
		cred := user + ":" + pass
		if pass == "" || strings.IndexFunc(cred+value, unicode.IsSpace) >= 0 || strings.Contains(cred+value, "://") ||
			strings.ContainsAny(value, "&;") || strings.ContainsAny(pass+value, "*") || !validHost(host) {
			return
		}
		if s := strings.IndexByte(cred, '/'); s >= 0 && strings.ContainsAny(cred[s:], "?#") {
			return
		}
		uri := "mongodb://" + cred + "@" + host + "/"
		if value != "" {
			uri += "?authMechanismProperties=" + value
		}
		in := before + " " + uri + " " + after
		out = URIs(in)
		if again := URIs(out); again != out {
			t.Fatalf("not idempotent: %q -> %q -> %q", in, out, again)
		}
		visible := before + " " + after + " mongodb://" + Hidden + "@" + host + "/?authMechanismProperties="
		for _, secret := range []string{pass, value} {
			if secret != "" && !strings.Contains(visible, secret) && strings.Contains(out, secret) {
				t.Fatalf("%q survives: %q -> %q", secret, in, out)
			}
		}
	})
}

func validHost(h string) bool {
	return h != "" && strings.Trim(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.:,[]-") == ""
}
