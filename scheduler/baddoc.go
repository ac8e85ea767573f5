package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/mongolock/mongolock/internal/baddoc"
	"github.com/mongolock/mongolock/lock"
)

// A document of the jobs or runs collection that a reader cannot read (a
// field of the wrong type, such as outcome: 7 or last: "x", or a run
// record without its firing, scheduled) is a lock.BadDocument: every
// reader (LoadRecords, LoadRecordsPage, LoadHistory, LoadHistoryPage,
// Scheduler.Jobs and Scheduler.History) skips it, returns the others, and
// reports it, in what it returns and, where a Scheduler reads it, as the
// event lock.DocumentUnreadable (a warning). The Scheduler's own reads and
// claims of a job document read what they can of it, report each field
// they cannot, and repair them (repairJob). A bad document never fails a
// whole read, nor panics it, nor silences a job.

// errMissing is the error of a field a document must have.
var errMissing = errors.New("missing")

// badDocument is what is wrong with raw, of coll, that decoding or
// checking it found: err, at field if err does not say.
func badDocument(coll string, raw bson.Raw, field string, err error) lock.BadDocument {
	return baddoc.Of(coll, raw, field, err)
}

// readEach calls read with each document of cur, in order, and returns
// those read refuses (with the field at fault, if its error does not name
// one) as bad documents of coll. It closes cur. An error is the read's.
func readEach(ctx context.Context, cur *mongo.Cursor, coll string, read func(bson.Raw) (field string, err error)) ([]lock.BadDocument, error) {
	defer func() { _ = cur.Close(context.WithoutCancel(ctx)) }()
	var bad []lock.BadDocument
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

// badField is a field of a job document that readJob could not read: its
// top-level key, the dotted path at fault, what was wrong, and its value
// as stored.
type badField struct {
	key, path, problem string
	value              bson.RawValue
}

// readJob reads raw, a job document, as far as it can: each field that
// cannot be read is left zero and returned in bad. err is for a document
// with no string _id, which is no job's.
func readJob(raw bson.Raw) (d jobDoc, bad []badField, err error) {
	for range len(raw) { // each round drops a field: it ends
		d = jobDoc{}
		err := bson.Unmarshal(raw, &d)
		if err == nil {
			break
		}
		de, ok := errors.AsType[*bson.DecodeError](err)
		if !ok || len(de.Keys()) == 0 || de.Keys()[0] == fieldID {
			return jobDoc{}, nil, err
		}
		key := de.Keys()[0]
		bad = append(bad, badField{key: key, path: strings.Join(de.Keys(), "."), problem: de.Unwrap().Error(), value: lookup(raw, key)})
		raw = without(raw, key)
	}
	if d.ID == "" {
		return jobDoc{}, nil, fmt.Errorf("field %q: %w", fieldID, errMissing)
	}
	// A claim's fields that read but cannot be the library's: a last
	// claim before any firing (a missing one reads as the zero time).
	if d.Last.Before(neverClaimed) && !slices.ContainsFunc(bad, func(b badField) bool { return b.key == fieldLast }) {
		v := lookup(raw, fieldLast)
		problem := "missing"
		if v.Type != 0 {
			problem = "not a date from 1970 on"
		}
		bad = append(bad, badField{key: fieldLast, path: fieldLast, problem: problem, value: v})
		d.Last = time.Time{}
	}
	return d, bad, nil
}

// without is raw without its field key.
func without(raw bson.Raw, key string) bson.Raw {
	elems, _ := raw.Elements() // raw was read: it is a document
	idx, out := bsoncore.AppendDocumentStart(nil)
	for _, e := range elems {
		if e.Key() != key {
			out = append(out, e...)
		}
	}
	out, _ = bsoncore.AppendDocumentEnd(out, idx)
	return out
}

// readJobDoc reads raw, a job document the store read or wrote, as readJob
// does, and reports and repairs the fields it could not read (repairJob).
func (s *mongoStore) readJobDoc(ctx context.Context, raw bson.Raw) (jobDoc, error) {
	d, bad, err := readJob(raw)
	if err != nil {
		s.reportBad([]lock.BadDocument{badDocument(s.jobs.Name(), raw, "", err)})
		return jobDoc{}, err
	}
	if len(bad) > 0 {
		s.repairJob(ctx, &d, bad)
	}
	return d, nil
}

// repairJob reports each field of d's document in bad, and removes them
// from the document, if they still hold what was read: the document is the
// library's own, and a field it cannot read means what its absence means
// (no run recorded, no trigger, not paused, no firing settled). A last
// claim that is not a date (the claim's filter matches it: claimFilter)
// becomes the last firing settled, or neverClaimed: the next claim covers
// its own firing, and those after a firing settled. A pending claim whose
// own fields are bad (last, cid, by, ptrig) cannot be started by anyone:
// it is settled, its firings not run; a firing never runs twice for it.
// A repair that fails is tried again at the next read.
func (s *mongoStore) repairJob(ctx context.Context, d *jobDoc, bad []badField) {
	filter := bson.D{{Key: fieldID, Value: d.ID}}
	var unset, set bson.D
	claimBad := false
	for _, b := range bad {
		if b.value.Type == 0 {
			filter = append(filter, bson.E{Key: b.key, Value: bson.D{{Key: "$exists", Value: false}}})
		} else {
			filter = append(filter, bson.E{Key: b.key, Value: bson.D{{Key: "$eq", Value: b.value}}})
		}
		switch b.key {
		case fieldLast:
			d.Last = neverClaimed
			if !d.Done.IsZero() && !slices.ContainsFunc(bad, func(b badField) bool { return b.key == fieldDone }) {
				d.Last = d.Done
			}
			set = append(set, bson.E{Key: fieldLast, Value: d.Last})
			claimBad = true
		case fieldHash:
			// The spec the cluster follows is the document's spec, which
			// the hash is of (specs.go).
			d.Hash = ""
			if d.Spec != "" && !slices.ContainsFunc(bad, func(b badField) bool { return b.key == fieldSpec }) {
				d.Hash = specHash(d.ID, d.Spec)
				set = append(set, bson.E{Key: fieldHash, Value: d.Hash})
			} else {
				unset = append(unset, bson.E{Key: b.key, Value: ""})
			}
		case fieldClaimID, fieldBy, fieldPTrig:
			unset = append(unset, bson.E{Key: b.key, Value: ""})
			claimBad = true
		default:
			unset = append(unset, bson.E{Key: b.key, Value: ""})
		}
	}
	if claimBad && d.Pending {
		set = append(set, bson.E{Key: fieldPending, Value: false})
		d.Pending = false
	}
	update := bson.D{}
	if len(set) > 0 {
		update = append(update, bson.E{Key: "$set", Value: set})
	}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	// Reported with the repair's outcome; one that did not apply is
	// tried again at the next read.
	outcome := "; repaired"
	if res, err := s.jobs.UpdateOne(ctx, filter, update); err != nil {
		outcome = "; not repaired: " + err.Error()
	} else if res.MatchedCount == 0 {
		outcome = "; not repaired: the document changed since it was read"
	}
	for _, b := range bad {
		s.reportBad([]lock.BadDocument{{Collection: s.jobs.Name(), ID: d.ID, Field: b.path, Problem: b.problem + outcome}})
	}
}

// lookup is raw's field key, the zero value if it has none.
func lookup(raw bson.Raw, key string) bson.RawValue {
	v, _ := raw.LookupErr(key)
	return v
}

// rawID is the _id of raw as text: where a page of documents ends.
func rawID(raw bson.Raw) string {
	v, err := raw.LookupErr(fieldID)
	if err != nil {
		return ""
	}
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	return v.String()
}
