// Package redact hides the credentials of the URIs found in text
// (package hideuri defines how) in what the dashboard and the CLI show:
// the text fields of the module's types.
package redact

import (
	"bytes"
	"encoding/hex"
	"unicode"
	"unicode/utf8"

	"github.com/mongolock/mongolock/internal/hideuri"
	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/migrations"
	"github.com/mongolock/mongolock/runner"
	"github.com/mongolock/mongolock/scheduler"
)

// Hidden replaces what is hidden.
const Hidden = hideuri.Hidden

// URIs returns s with the credentials of every URI in it hidden
// (hideuri.URIs, whose definition this is for the dashboard and the CLI).
func URIs(s string) string { return hideuri.URIs(s) }

// URI returns the connection string uri with its credentials hidden, as
// one word (hideuri.URI).
func URI(uri string) string { return hideuri.URI(uri) }

// Holder returns h with its text (lock and keeper ids, and its value
// when it is text: ValueText) passed through f, sharing nothing with h.
func Holder(h lock.Holder, f func(string) string) lock.Holder {
	h.LockID, h.KeeperID = f(h.LockID), f(h.KeeperID)
	if isText(h.Value) {
		h.Value = []byte(f(string(h.Value)))
	} else {
		h.Value = bytes.Clone(h.Value)
	}
	return h
}

// ValueText is how a lease's value (lock.Holder.Value) is shown: as text
// if it is printable UTF-8 (an address, say), else in hex after "0x"; ""
// for none. Pass the Holder through Holder first: hex hides nothing, so
// only text needs redacting.
func ValueText(v []byte) string {
	switch {
	case len(v) == 0:
		return ""
	case isText(v):
		return string(v)
	}
	return "0x" + hex.EncodeToString(v)
}

// isText reports whether v is printable UTF-8 (spaces included).
func isText(v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	for _, r := range string(v) {
		if !unicode.IsPrint(r) && r != ' ' {
			return false
		}
	}
	return true
}

// Run returns r with its text (job, keeper, error, reason) passed through f.
func Run(r scheduler.Run, f func(string) string) scheduler.Run {
	r.Job, r.Keeper, r.Error, r.Reason = f(r.Job), f(r.Keeper), f(r.Error), f(r.Reason)
	return r
}

// Record returns r with its text (name, keepers, pause, last run) passed
// through f, sharing nothing with r.
func Record(r scheduler.Record, f func(string) string) scheduler.Record {
	r.Name, r.ClaimedBy = f(r.Name), f(r.ClaimedBy)
	if r.LastRun != nil {
		lr := Run(*r.LastRun, f)
		r.LastRun = &lr
	}
	if r.Paused != nil {
		p := *r.Paused
		p.Note, p.By = f(p.Note), f(p.By)
		r.Paused = &p
	}
	specs := make([]scheduler.RegisteredSpec, len(r.Specs))
	for i, s := range r.Specs {
		s.By = f(s.By)
		specs[i] = s
	}
	if r.Specs != nil {
		r.Specs = specs
	}
	return r
}

// Term returns t with its text (lock and keeper ids, reason) passed
// through f.
func Term(t runner.Term, f func(string) string) runner.Term {
	t.LockID, t.KeeperID, t.Reason = f(t.LockID), f(t.KeeperID), f(t.Reason)
	return t
}

// Migration returns e with its record's text (error, keeper) passed
// through f, sharing nothing with e.
func Migration(e migrations.Entry, f func(string) string) migrations.Entry {
	if e.Record != nil {
		r := *e.Record
		r.Error, r.Keeper = f(r.Error), f(r.Keeper)
		e.Record = &r
	}
	return e
}
