package scheduler

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
)

// MaxHistoryPage is the most records LoadHistoryPage reads in one page.
const MaxHistoryPage = 500

// HistoryQuery selects a page of a job's run history (LoadHistoryPage).
// Every filter is on fields of the history index (job, then firing time)
// or narrows what that index range yields, so a page costs one indexed
// read of at most Limit+1 records past the cursor on MongoDB, whatever the
// history's size.
type HistoryQuery struct {
	Job string
	// Outcomes keeps the records with one of these outcomes; all if empty.
	Outcomes []Outcome
	// ReasonPrefix keeps the records whose reason begins with it (such as
	// "missed"); all if empty.
	ReasonPrefix string
	// Retries keeps only attempts after the first (JobRetries).
	Retries bool
	// From and To keep firings at or after From and before To (Run.Scheduled);
	// zero: unbounded.
	From, To time.Time
	// Cursor continues from a page read before (HistoryPage.Older or
	// Newer); nil reads the newest page.
	Cursor *HistoryCursor
	// Limit is the page's size, from 1 to MaxHistoryPage.
	Limit int
}

// HistoryCursor marks where a page of history ends, to read the next one
// from there. String and ParseHistoryCursor carry it through a URL.
type HistoryCursor struct {
	// At is the firing time of the last record shown (the oldest, going to
	// older pages; the newest, going to newer ones) and Skip how many
	// records of that firing time were shown: attempts of one firing share
	// it.
	At   time.Time
	Skip int
	// Newer: the cursor goes to newer records; otherwise to older ones.
	Newer bool
}

// String encodes c as "o" or "n" (older, newer), the firing time in Unix
// nanoseconds, and the skip: "o1700000000000000000.1".
func (c HistoryCursor) String() string {
	dir := "o"
	if c.Newer {
		dir = "n"
	}
	return dir + strconv.FormatInt(c.At.UnixNano(), 10) + "." + strconv.Itoa(c.Skip)
}

// ParseHistoryCursor decodes HistoryCursor.String, and returns an error
// wrapping ErrInvalidOption for anything else.
func ParseHistoryCursor(s string) (HistoryCursor, error) {
	bad := fmt.Errorf("%w: history cursor %q", ErrInvalidOption, s)
	if len(s) < 4 || len(s) > 64 || (s[0] != 'o' && s[0] != 'n') {
		return HistoryCursor{}, bad
	}
	at, skip, ok := strings.Cut(s[1:], ".")
	if !ok {
		return HistoryCursor{}, bad
	}
	ns, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return HistoryCursor{}, bad
	}
	k, err := strconv.Atoi(skip)
	if err != nil || k < 0 || k > MaxHistoryPage*16 {
		return HistoryCursor{}, bad
	}
	return HistoryCursor{At: time.Unix(0, ns).UTC(), Skip: k, Newer: s[0] == 'n'}, nil
}

// HistoryPage is a page of run history, newest first.
type HistoryPage struct {
	Runs []Run
	// Bad are the records of the page that could not be read (a field of
	// the wrong type, or no firing time), and are not in Runs
	// (lock.BadDocument).
	Bad []lock.BadDocument
	// Older and Newer continue to the neighbouring pages; nil when there
	// is none (Newer is nil on the newest page).
	Older, Newer *HistoryCursor
}

// LoadHistoryPage reads one page of the history of q.Job from coll (the
// runs collection), newest first, from the primary whatever coll's read
// preference. A cursor past either end gives an empty page; a page going
// to newer records that comes out short is the newest page instead. Bad
// arguments return an error wrapping ErrInvalidOption and read nothing. A
// record that cannot be read takes its place on the page, in Bad instead
// of Runs; one whose firing time is missing or not a time sorts after
// every other, and only the newest page (no cursor) can reach it.
func LoadHistoryPage(ctx context.Context, coll *mongo.Collection, q HistoryQuery) (HistoryPage, error) {
	if err := checkColl("load history page", ctx, coll, "runs"); err != nil {
		return HistoryPage{}, err
	}
	filter, err := q.filter()
	if err != nil {
		return HistoryPage{}, err
	}
	c := q.Cursor
	newer := c != nil && c.Newer
	dir := -1
	if newer {
		dir = 1
	}
	if c != nil {
		op := "$lte"
		if newer {
			op = "$gte"
		}
		filter = append(filter, bson.E{Key: "$and", Value: bson.A{bson.D{{Key: fieldScheduled, Value: bson.D{{Key: op, Value: c.At}}}}}})
	}
	opts := options.Find().
		SetSort(bson.D{{Key: fieldJob, Value: 1}, {Key: fieldScheduled, Value: dir}, {Key: fieldAttempt, Value: dir}}).
		SetLimit(int64(q.Limit + 1))
	if c != nil && c.Skip > 0 {
		opts.SetSkip(int64(c.Skip))
	}
	cur, err := mongoutil.Primary(coll).Find(ctx, filter, opts)
	if err != nil {
		return HistoryPage{}, wrapErr(ctx, "read a page of the history of", q.Job, err)
	}
	// The first q.Limit records are the page, those that cannot be read
	// included (in page.Bad): each has its place in the cursors' counts.
	var page HistoryPage
	var ats []time.Time // the firing times of the page's records, zero if unreadable
	read := 0
	page.Bad, err = readEach(ctx, cur, coll.Name(), func(raw bson.Raw) (string, error) {
		if read++; read > q.Limit {
			return "", nil
		}
		at, _ := raw.Lookup(fieldScheduled).TimeOK()
		ats = append(ats, at)
		r, field, err := decodeRun(raw, q.Job)
		if err == nil {
			page.Runs = append(page.Runs, r)
		}
		return field, err
	})
	if err != nil {
		return HistoryPage{}, wrapErr(ctx, "read a page of the history of", q.Job, err)
	}
	more := read > q.Limit
	if newer {
		if !more && len(ats) < q.Limit {
			// The newest records: show a full newest page instead.
			q.Cursor = nil
			return LoadHistoryPage(ctx, coll, q)
		}
		slices.Reverse(page.Runs)
		slices.Reverse(ats)
	}
	ats = slices.DeleteFunc(ats, time.Time.IsZero) // a cursor's query does not reach them again
	if len(ats) == 0 {
		return page, nil
	}
	// Going older, more means older records exist; going newer, it means
	// newer ones do. The other way always has records: those the cursor
	// came from.
	if (!newer && more) || newer {
		page.Older = edgeCursor(ats, len(ats)-1, c, false)
	}
	if (newer && more) || (!newer && c != nil) {
		page.Newer = edgeCursor(ats, 0, c, true)
	}
	return page, nil
}

// edgeCursor is the cursor past ats[i], the firing time of the oldest (i
// last) or newest (i 0) record of a page read with cursor c: that time,
// and how many records of it the page and the pages it came from showed
// on that side.
func edgeCursor(ats []time.Time, i int, c *HistoryCursor, newer bool) *HistoryCursor {
	at := ats[i]
	n := 0
	for _, t := range ats {
		if t.Equal(at) {
			n++
		}
	}
	if c != nil && c.At.Equal(at) && c.Newer == newer && n == len(ats) {
		n += c.Skip // the whole page is of that firing time: add what came before
	}
	return &HistoryCursor{At: at.UTC(), Skip: n, Newer: newer}
}

// filter checks q and returns its filter, without the cursor.
func (q HistoryQuery) filter() (bson.D, error) {
	switch {
	case q.Job == "":
		return nil, fmt.Errorf("%w: history page: job is empty", ErrInvalidOption)
	case q.Limit < 1 || q.Limit > MaxHistoryPage:
		return nil, fmt.Errorf("%w: history page of %q: limit %d not in [1, %d]", ErrInvalidOption, q.Job, q.Limit, MaxHistoryPage)
	case !q.From.IsZero() && !q.To.IsZero() && !q.From.Before(q.To):
		return nil, fmt.Errorf("%w: history page of %q: from %s not before to %s", ErrInvalidOption, q.Job,
			q.From.UTC().Format(time.RFC3339), q.To.UTC().Format(time.RFC3339))
	}
	filter := bson.D{{Key: fieldJob, Value: q.Job}}
	var when bson.D
	if !q.From.IsZero() {
		when = append(when, bson.E{Key: "$gte", Value: q.From})
	}
	if !q.To.IsZero() {
		when = append(when, bson.E{Key: "$lt", Value: q.To})
	}
	if len(when) > 0 {
		filter = append(filter, bson.E{Key: fieldScheduled, Value: when})
	}
	if len(q.Outcomes) > 0 {
		in := bson.A{}
		for _, o := range q.Outcomes {
			switch o {
			case OutcomeRunning, OutcomeSucceeded, OutcomeFailed, OutcomeSkipped:
				in = append(in, string(o))
			default:
				return nil, fmt.Errorf("%w: history page of %q: unknown outcome %q", ErrInvalidOption, q.Job, o)
			}
		}
		filter = append(filter, bson.E{Key: fieldOutcome, Value: bson.D{{Key: "$in", Value: in}}})
	}
	if q.ReasonPrefix != "" {
		filter = append(filter, bson.E{Key: fieldReason, Value: bson.D{{Key: "$regex", Value: "^" + regexpQuote(q.ReasonPrefix)}}})
	}
	if q.Retries {
		filter = append(filter, bson.E{Key: fieldAttempt, Value: bson.D{{Key: "$gt", Value: 1}}})
	}
	return filter, nil
}

// regexpQuote escapes the regular expression metacharacters of s.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
