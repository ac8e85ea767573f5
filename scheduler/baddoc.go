package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// BadDocument is a document of the jobs or runs collection that a reader
// could not read: a field of the wrong type (outcome: 7, last: "x"), or a
// run record without its firing (scheduled). Every reader (LoadRecords,
// LoadRecordsPage, LoadHistory, LoadHistoryPage, Scheduler.Jobs and
// Scheduler.History) skips such a document, returns the others, and
// reports it: in what it returns, and, where a Scheduler reads it, as the
// event lock.DocumentUnreadable (logged as a warning). A bad document
// never fails the whole read, nor panics it.
type BadDocument struct {
	Collection string
	// ID is the document's _id, as text (extended JSON if it is not a
	// string).
	ID string
	// Field is the dotted path of the field that could not be read
	// ("outcome", "regs.a1b2.spec"); empty if the document as a whole
	// could not be.
	Field string
	// Err says what was wrong; it wraps ErrBadDocument.
	Err error
}

func (b BadDocument) String() string {
	if b.Field == "" {
		return fmt.Sprintf("%s document %s: %v", b.Collection, b.ID, b.Err)
	}
	return fmt.Sprintf("%s document %s, field %q: %v", b.Collection, b.ID, b.Field, b.Err)
}

// errMissing is the error of a field a document must have.
var errMissing = errors.New("missing")

// badDocument is what is wrong with raw, of coll, that decoding or
// checking it found: err, at field if err does not say.
func badDocument(coll string, raw bson.Raw, field string, err error) BadDocument {
	if de, ok := errors.AsType[*bson.DecodeError](err); ok {
		field, err = strings.Join(de.Keys(), "."), de.Unwrap()
	}
	return BadDocument{Collection: coll, ID: rawID(raw), Field: field, Err: fmt.Errorf("%w: %w", ErrBadDocument, err)}
}

// rawID is the _id of raw as text.
func rawID(raw bson.Raw) string {
	v, err := raw.LookupErr(fieldID)
	if err != nil {
		return "(no _id)"
	}
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	return v.String()
}

// readEach calls read with each document of cur, in order, and returns
// those read refuses (with the field at fault, if its error does not name
// one) as bad documents of coll. It closes cur. An error is the read's.
func readEach(ctx context.Context, cur *mongo.Cursor, coll string, read func(bson.Raw) (field string, err error)) ([]BadDocument, error) {
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var bad []BadDocument
	for cur.Next(ctx) {
		if field, err := read(cur.Current); err != nil {
			bad = append(bad, badDocument(coll, cur.Current, field, err))
		}
	}
	return bad, cur.Err()
}

// decodeRun reads raw, a history record of job, or a job document's run.
func decodeRun(raw bson.Raw, job string) (Run, string, error) {
	var d runDoc
	if err := bson.Unmarshal(raw, &d); err != nil {
		return Run{}, "", err
	}
	if d.Scheduled.IsZero() {
		return Run{}, fieldScheduled, errMissing
	}
	return *d.run(job), "", nil
}

// decodeJob reads raw, a job document.
func decodeJob(raw bson.Raw) (jobDoc, string, error) {
	var d jobDoc
	if err := bson.Unmarshal(raw, &d); err != nil {
		return jobDoc{}, "", err
	}
	if d.ID == "" {
		return jobDoc{}, fieldID, errMissing
	}
	return d, "", nil
}
