// Package errs holds the one error helper the packages built on lock
// share.
package errs

// Kind returns a sentinel error with message msg that also matches parent
// with errors.Is, without repeating parent's message: a package's own
// sentinel for a kind of error package lock has too (bad input, a lost
// lease).
func Kind(msg string, parent error) error { return &kind{msg, parent} }

type kind struct {
	msg    string
	parent error
}

func (e *kind) Error() string { return e.msg }
func (e *kind) Unwrap() error { return e.parent }
