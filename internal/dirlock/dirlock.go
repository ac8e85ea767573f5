// Package dirlock keeps a directory to one process at a time with an
// operating-system file lock, which the kernel releases when the process
// ends, however it ends: a server that crashed leaves nothing to clean up.
// The embedded server locks its data directory with it; the command line
// reads its error. It imports nothing outside the standard library.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FileName is the lock file in a locked directory. It stays after Unlock
// (removing it would let two processes lock two different files), holding
// what its last holder wrote.
const FileName = ".mongolock-dev.lock"

// ErrLocked is wrapped by the error of Lock when another process holds the
// directory: a *LockedError.
var ErrLocked = errors.New("directory in use by another process")

// LockedError says which directory is locked, and who holds it as far as
// its lock file tells.
type LockedError struct {
	Dir string
	// Holder is what the holder wrote (Describe): its process id and
	// address, say; empty if it wrote nothing yet.
	Holder string
}

func (e *LockedError) Error() string {
	if e.Holder == "" {
		return fmt.Sprintf("%s: %v", e.Dir, ErrLocked)
	}
	return fmt.Sprintf("%s: %v (%s)", e.Dir, ErrLocked, e.Holder)
}

func (e *LockedError) Unwrap() error { return ErrLocked }

// Lock is a held directory lock.
type Lock struct {
	f *os.File
}

// Acquire locks dir, which must exist, without waiting: another process
// holding it gets a *LockedError. On systems without flock (Windows,
// Solaris) it only creates the file and locks nothing.
func Acquire(dir string) (*Lock, error) {
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	locked, err := tryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	if !locked {
		holder, _ := os.ReadFile(f.Name())
		f.Close()
		return nil, &LockedError{Dir: dir, Holder: strings.TrimSpace(string(holder))}
	}
	return &Lock{f: f}, nil
}

// Describe writes who holds the lock to its file, for the error of the next
// process that tries: the process id and info (an address, say).
func (l *Lock) Describe(info string) error {
	line := "pid " + strconv.Itoa(os.Getpid())
	if info != "" {
		line += ", " + info
	}
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(line+"\n"), 0)
	return err
}

// Release unlocks the directory. Releasing twice does nothing.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing releases the lock
	l.f = nil
	return err
}
