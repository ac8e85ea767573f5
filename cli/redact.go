package cli

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/mongolock/mongolock/internal/redact"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// redactor hides credentials in what the command prints: the connection
// string's, and those of any URI in errors and in text read from the
// database (job errors, notes, keeper and lock ids), by the structure of
// the text alone (package internal/redact). It knows no secret to look
// for, so what it prints tells nothing of one.
type redactor struct {
	raw string // the URI as given
}

func newRedactor(uri string) redactor {
	return redactor{raw: uri}
}

// uri returns the connection string with its credentials hidden.
func (r redactor) uri() string {
	if r.raw == "" {
		return "<no URI>"
	}
	return redact.URI(r.raw)
}

// oneLine hides the credentials of the URIs in s and folds it onto one
// line.
func (r redactor) oneLine(s string) string {
	return oneLine(redact.URIs(s))
}

// uriError is the driver's error for the connection string, which quotes
// parts of it ("invalid password: invalid URL escape "%zz""): a quoted
// part shows if the redacted URI shows it too, if it is not from the URI
// at all, or if it is one of the driver's own words (`scheme must be
// "mongodb" or "mongodb+srv"`); else it is hidden. Only the driver's words
// about the URI given are treated so: nothing read from the database
// passes here.
func (r redactor) uriError(err error) string {
	safe := r.uri()
	return oneLine(quoted.ReplaceAllStringFunc(err.Error(), func(q string) string {
		inner := q[1 : len(q)-1]
		if u, err := strconv.Unquote(q); err == nil {
			inner = u
		}
		if inner == "" || inner == "mongodb" || inner == "mongodb+srv" || strings.Contains(safe, inner) || !strings.Contains(r.raw, inner) {
			return q
		}
		return `"` + redact.Hidden + `"`
	}))
}

// quoted is a quoted string, as %q writes it.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// oneLine folds s onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// The one place each kind of document the commands print is redacted:
// right after it is read.

func redactHolder(h lock.Holder) lock.Holder { return redact.Holder(h, redact.URIs) }

// redactJobs returns jobs and their history (by name) redacted: read by
// their names, shown by their redacted ones.
func redactJobs(jobs []listedJob, hist map[string][]scheduler.Run) ([]listedJob, map[string][]scheduler.Run) {
	out := make([]listedJob, len(jobs))
	outHist := make(map[string][]scheduler.Run, len(hist))
	for i, j := range jobs {
		runs := hist[j.rec.Name]
		j.rec = redact.Record(j.rec, redact.URIs)
		out[i] = j
		if runs == nil {
			continue
		}
		red := make([]scheduler.Run, len(runs))
		for k, r := range runs {
			red[k] = redact.Run(r, redact.URIs)
		}
		outHist[j.rec.Name] = red
	}
	return out, outHist
}
