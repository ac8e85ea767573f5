package cli

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/mongolock/mongolock/internal/redact"
	"github.com/mongolock/mongolock/lock"
)

// lockJSON is one lock in `locks list --json` and `locks show --json`. The
// fence is a string: it does not fit the integers JSON readers handle.
type lockJSON struct {
	Lock   string `json:"lock"`
	Keeper string `json:"keeper"`
	// Value is the holder's value (lock.Holder.Value) as text, or in hex
	// after "0x" if it is not printable (redact.ValueText).
	Value       string `json:"value,omitempty"`
	AcquiredAt  string `json:"acquiredAt"`
	RenewedAt   string `json:"renewedAt"`
	ExpiresAt   string `json:"expiresAt"`
	ExpiresInMS int64  `json:"expiresInMs"`
	Expired     bool   `json:"expired"`
	Fence       string `json:"fence"`
	// Semaphore and Slot name the semaphore and slot of a slot's lock
	// (lock.SlotID), absent for other locks.
	Semaphore string `json:"semaphore,omitempty"`
	Slot      *int   `json:"slot,omitempty"`
}

func toJSON(h lock.Holder) lockJSON {
	j := lockJSON{
		Lock:        h.LockID,
		Keeper:      h.KeeperID,
		Value:       redact.ValueText(h.Value),
		AcquiredAt:  jsonTime(h.AcquiredAt),
		RenewedAt:   jsonTime(h.RenewedAt),
		ExpiresAt:   jsonTime(h.ExpiresAt),
		ExpiresInMS: max(h.ExpiresAt.Sub(h.ReadAt), 0).Milliseconds(),
		Expired:     h.Expired,
		Fence:       strconv.FormatUint(h.Fence, 10),
	}
	if name, k, ok := lock.ParseSlotID(h.LockID); ok {
		j.Semaphore, j.Slot = name, &k
	}
	return j
}

// shortValue is a holder's value in a table column: on one line, at most
// valueColumn characters.
func shortValue(v []byte) string {
	s := []rune(oneLine(redact.ValueText(v)))
	if len(s) > valueColumn {
		return string(s[:valueColumn-1]) + "…"
	}
	return string(s)
}

// valueColumn is the width of the VALUE column of locks list.
const valueColumn = 40

// expiresIn says when a lease ends, by the server's clock when it was read,
// as h.Expired judged it.
func expiresIn(h lock.Holder) string {
	left := h.ExpiresAt.Sub(h.ReadAt)
	if h.Expired || left <= 0 {
		return fmt.Sprintf("expired %s ago", fmtDur(max(-left, 0)))
	}
	return fmtDur(left)
}

// openLocker connects and returns a Locker on the lock collection.
func (a *app) openLocker(ctx context.Context) (*lock.Locker, func(), error) {
	log, err := a.logger()
	if err != nil {
		return nil, nil, err
	}
	db, disconnect, err := a.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	// A bad lock document is named as the jobs command names a bad job
	// document (warnBad), and the listing goes on.
	l, err := a.locker(db, nil, log, lock.WithBadDocuments(func(b lock.BadDocument) { a.warnBad(log, []lock.BadDocument{b}) }))
	if err != nil {
		disconnect()
		return nil, nil, err
	}
	return l, disconnect, nil
}

// lockSession parses flags and opens a Locker.
func (a *app) lockSession(ctx context.Context, fs *flag.FlagSet, args []string) ([]string, *lock.Locker, func(), error) {
	pos, err := a.parse(fs, args)
	if err != nil {
		return nil, nil, nil, err
	}
	l, done, err := a.openLocker(ctx)
	return pos, l, done, err
}

// locksHelp is printed after the flags of `locks -h` and by `locks help`.
const locksHelp = `locks alone lists the locks, as locks list does (and as jobs alone lists the
jobs); list, show, release and help are commands when they come first after
locks, flags aside.
`

// locks lists the locks, as locks list does, unless args name a
// subcommand: a collection named alone is listed, as jobs does.
func (a *app) locks(ctx context.Context, args []string) error {
	self, _ := a.command("locks")
	if sub, rest, ok := a.subcommand(self, a.locksListFlags("locks"), args); ok {
		return sub.run(a, ctx, rest)
	}
	return a.listLocks(ctx, self, args)
}

func (a *app) locksList(ctx context.Context, args []string) error {
	return a.listLocks(ctx, command{name: "locks list"}, args)
}

// locksListFlags is the flag set of locks list, and of locks alone.
func (a *app) locksListFlags(name string) *flag.FlagSet {
	fs := a.flagSet(name)
	fs.Bool("json", false, "print JSON")
	return fs
}

// listLocks is locks list, run as cmd: locks list, or locks alone.
func (a *app) listLocks(ctx context.Context, cmd command, args []string) error {
	fs := a.locksListFlags(cmd.name)
	pos, err := a.parse(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0 && cmd.sub != nil:
		return usagef("unknown command %q %q: want one of %s", cmd.name, pos[0], names(cmd.sub))
	case len(pos) > 0:
		return usagef("%s takes no arguments, got %q", cmd.name, pos[0])
	}
	asJSON := fs.Lookup("json").Value.(flag.Getter).Get().(bool)
	l, done, err := a.openLocker(ctx)
	if err != nil {
		return err
	}
	defer done()
	holders, err := l.Locks(ctx)
	if err != nil {
		return err
	}
	for i, h := range holders {
		holders[i] = redactHolder(h)
	}
	if asJSON {
		out := make([]lockJSON, 0, len(holders))
		for _, h := range holders {
			out = append(out, toJSON(h))
		}
		return a.printJSON(out)
	}
	if len(holders) == 0 {
		fmt.Fprintf(a.stdout, "no locks in %s.%s\n", a.g.db, a.g.collection)
		return nil
	}
	tw := table(a.stdout)
	fmt.Fprintln(tw, "LOCK\tKEEPER\tVALUE\tACQUIRED\tRENEWED\tEXPIRES IN\tFENCE")
	for _, h := range holders {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", h.LockID, orDash(h.KeeperID), orDash(shortValue(h.Value)), fmtTime(h.AcquiredAt), fmtTime(h.RenewedAt), expiresIn(h), h.Fence)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	semaphoreSlots(a.stdout, holders)
	printCandidates(a.stdout, holders)
	warnSharedKeepers(a.stdout, holders)
	return nil
}

// holder returns the lock document of id, expired or not. A lock its
// keeper released keeps its document (for its fence), but is no lock to
// show or release.
func holder(ctx context.Context, l *lock.Locker, id string) (lock.Holder, error) {
	h, err := l.Holder(ctx, id)
	switch {
	case errors.Is(err, lock.ErrInvalidArgument):
		return h, usagef("%v", err)
	case errors.Is(err, lock.ErrNotHeld) && h.LockID == "":
		return h, fmt.Errorf("lock %q: there is no such lock in %s", id, l.Collection().Name())
	case errors.Is(err, lock.ErrNotHeld) && h.Released:
		return h, fmt.Errorf("lock %q: there is no such lock in %s (released at %s)", id, l.Collection().Name(), fmtTime(h.RenewedAt))
	case err != nil && !errors.Is(err, lock.ErrNotHeld):
		return h, err
	}
	return h, nil
}

func (a *app) locksShow(ctx context.Context, args []string) error {
	fs := a.flagSet("locks show")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, l, done, err := a.lockSession(ctx, fs, args)
	if err != nil {
		return err
	}
	defer done()
	if len(pos) != 1 {
		return usagef("locks show needs one lock id")
	}
	h, err := holder(ctx, l, pos[0])
	if err != nil {
		return err
	}
	h = redactHolder(h)
	if *asJSON {
		return a.printJSON(toJSON(h))
	}
	state := "held, expires in " + expiresIn(h)
	if h.Expired {
		state = expiresIn(h) + "; the next acquisition takes it over"
	}
	tw := table(a.stdout)
	fmt.Fprintf(tw, "lock:\t%s\n", h.LockID)
	fmt.Fprintf(tw, "keeper:\t%s\n", orDash(h.KeeperID))
	fmt.Fprintf(tw, "value:\t%s\n", orDash(oneLine(redact.ValueText(h.Value))))
	fmt.Fprintf(tw, "state:\t%s\n", state)
	fmt.Fprintf(tw, "acquired:\t%s\n", fmtTime(h.AcquiredAt))
	fmt.Fprintf(tw, "renewed:\t%s\n", fmtTime(h.RenewedAt))
	fmt.Fprintf(tw, "expires:\t%s\n", fmtTime(h.ExpiresAt))
	fmt.Fprintf(tw, "fence:\t%d\n", h.Fence)
	return tw.Flush()
}

func (a *app) locksRelease(ctx context.Context, args []string) error {
	fs := a.flagSet("locks release")
	keeper := fs.String("keeper", "", "release as this keeper: only if it holds the lock")
	force := fs.Bool("force", false, "release whoever holds the lock (asks first)")
	yes := fs.Bool("yes", false, "with --force: do not ask")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usagef("locks release needs one lock id")
	case *keeper != "" && *force:
		return usagef("give --keeper or --force, not both")
	case *keeper == "" && !*force:
		return usagef("locks release needs --keeper K (release as the holder) or --force (release whoever holds it)")
	case *yes && !*force:
		return usagef("--yes goes with --force")
	case *force && !*yes && !a.isTerminal(a.stdin):
		return usagef("refusing to force-release %q without confirmation: stdin is not a terminal; add --yes", pos[0])
	}
	id := pos[0]
	l, done, err := a.openLocker(ctx)
	if err != nil {
		return err
	}
	defer done()

	if !*force {
		n, err := l.ReleaseLocks(ctx, *keeper, id)
		switch {
		case errors.Is(err, lock.ErrInvalidArgument):
			return usagef("%v", err)
		case err != nil:
			return err
		case n == 0:
			return fmt.Errorf("lock %q is not held by %q; nothing released", id, *keeper)
		}
		fmt.Fprintf(a.stdout, "released %q held by %q\n", id, *keeper)
		return nil
	}

	h, err := holder(ctx, l, id)
	if err != nil {
		return err
	}
	shown := redactHolder(h) // h's own ids release it
	if !*yes {
		fmt.Fprintf(a.stderr, "Lock %q is held by %q (fence %d, %s).\n", shown.LockID, shown.KeeperID, h.Fence, expiresIn(h))
		fmt.Fprintf(a.stderr, "Its holder is not told and may still be working. Force-release it? Type yes: ")
		line, _ := bufio.NewReader(a.stdin).ReadString('\n')
		if ans := strings.ToLower(strings.TrimSpace(line)); ans != "yes" && ans != "y" {
			return errors.New("not confirmed; nothing released")
		}
	}
	// Release only if the lock is still the one shown: as its keeper, unless
	// the document has none.
	if h.KeeperID != "" && lock.ValidateID("keeperID", h.KeeperID) == nil {
		var n int
		n, err = l.ReleaseLocks(ctx, h.KeeperID, id)
		if err == nil && n == 0 {
			return fmt.Errorf("lock %q changed hands since it was read; nothing released, run again", id)
		}
	} else {
		err = l.ForceRelease(ctx, id)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "force-released %q held by %q (fence %d); the next holder gets a larger fence\n", shown.LockID, shown.KeeperID, h.Fence)
	return nil
}
