package scheduler

import (
	"context"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/mongolock/mongolock/internal/mongoutil"
	"github.com/mongolock/mongolock/lock"
)

// MaxRecordsPage is the most job records LoadRecordsPage reads in one page.
const MaxRecordsPage = 1000

// RecordsQuery selects a page of job records (LoadRecordsPage), by name.
type RecordsQuery struct {
	// Prefix keeps the jobs whose name begins with it.
	Prefix string
	// After continues after the job of that name (RecordsPage.Next); empty:
	// from the first.
	After string
	// Attention keeps the jobs an operator should look at: failing (failed
	// firings in a row, or a last run that failed), paused, removed, or
	// with a last run still recorded as running.
	Attention bool
	// Limit is the page's size, from 1 to MaxRecordsPage.
	Limit int
}

// RecordsPage is a page of job records, sorted by name.
type RecordsPage struct {
	Records []Record
	// Next is the After of the next page, empty on the last.
	Next string
	// Bad are the documents of the page that could not be read, and are
	// not in Records (lock.BadDocument).
	Bad []lock.BadDocument
}

// LoadRecordsPage reads a page of the job documents of coll (the jobs
// collection) by name, from the primary: one read on the _id index of at
// most q.Limit+1 documents past q.After, and the server's time if a pause
// on the page has an end (as LoadRecords). Bad arguments return an error
// wrapping ErrInvalidOption and read nothing. A document that cannot be
// read takes its place on the page, in Bad instead of Records.
func LoadRecordsPage(ctx context.Context, coll *mongo.Collection, q RecordsQuery) (RecordsPage, error) {
	if err := checkColl("load records page", ctx, coll, "jobs"); err != nil {
		return RecordsPage{}, err
	}
	if q.Limit < 1 || q.Limit > MaxRecordsPage {
		return RecordsPage{}, fmt.Errorf("%w: records page: limit %d not in [1, %d]", ErrInvalidOption, q.Limit, MaxRecordsPage)
	}
	id := bson.D{}
	if q.After != "" {
		id = append(id, bson.E{Key: "$gt", Value: q.After})
	}
	if q.Prefix != "" {
		id = append(id, bson.E{Key: "$regex", Value: "^" + regexpQuote(q.Prefix)})
	}
	filter := bson.D{}
	if len(id) > 0 {
		filter = append(filter, bson.E{Key: fieldID, Value: id})
	}
	if q.Attention {
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: fieldFails, Value: bson.D{{Key: "$gt", Value: 0}}}},
			bson.D{{Key: fieldOutcome, Value: string(OutcomeFailed)}},
			bson.D{{Key: fieldOutcome, Value: string(OutcomeRunning)}},
			bson.D{{Key: fieldPaused, Value: true}},
			bson.D{{Key: fieldRemoved, Value: true}},
		}})
	}
	cur, err := mongoutil.Primary(coll).Find(ctx, filter,
		options.Find().SetSort(bson.D{{Key: fieldID, Value: 1}}).SetLimit(int64(q.Limit+1)))
	if err != nil {
		return RecordsPage{}, wrapErr(ctx, "read a page of jobs from", coll.Name(), err)
	}
	// The first q.Limit documents are the page, those that cannot be
	// read included: the next page starts after the last of them.
	var page RecordsPage
	var docs []jobDoc
	var last string // the _id of the page's last document
	seen := 0
	page.Bad, err = readEach(ctx, cur, coll.Name(), func(raw bson.Raw) (string, error) {
		if seen++; seen > q.Limit {
			page.Next = last
			return "", nil
		}
		last = rawID(raw)
		d, field, err := decodeJob(raw)
		if err == nil {
			docs = append(docs, d)
		}
		return field, err
	})
	if err != nil {
		return RecordsPage{}, wrapErr(ctx, "read a page of jobs from", coll.Name(), err)
	}
	if page.Records, err = recordsOf(ctx, coll, docs); err != nil {
		return RecordsPage{}, err
	}
	return page, nil
}
