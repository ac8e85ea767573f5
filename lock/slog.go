package lock

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// SlogObserver logs events to l, as LogObserver does to a zerolog.Logger:
// the same levels (slog.LevelWarn, slog.LevelInfo, slog.LevelDebug), the
// same message (the event's kind) and the same keys (lock, keeper, fence,
// took, error, job, ...). l must not be nil: SlogObserver(nil) is nil,
// which WithObserver and AddObserver refuse.
func SlogObserver(l *slog.Logger) Observer {
	if l == nil {
		return nil
	}
	return ObserverFunc(func(e Event) { slogEvent(l, e) })
}

// WithSessionSlog logs the Session's events, and those of everything built
// on it, to l (SlogObserver). Default: no logging.
func WithSessionSlog(l *slog.Logger) SessionOption {
	return func(c *sessionConfig) error {
		if l == nil {
			return fmt.Errorf("%w: WithSessionSlog: nil logger", ErrInvalidOption)
		}
		c.observers = append(c.observers, SlogObserver(l))
		return nil
	}
}

func slogEvent(l *slog.Logger, e Event) {
	level := slog.LevelDebug
	switch levelOf(e) {
	case levelWarn:
		level = slog.LevelWarn
	case levelInfo:
		level = slog.LevelInfo
	}
	// Observers have no context; handlers that read one get Background.
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	var w slogFields
	writeFields(e, &w)
	l.LogAttrs(ctx, level, e.Kind.String(), w.attrs...)
}

// slogFields collects fields as slog attributes.
type slogFields struct{ attrs []slog.Attr }

func (s *slogFields) str(k, v string)               { s.attrs = append(s.attrs, slog.String(k, v)) }
func (s *slogFields) uint64(k string, v uint64)     { s.attrs = append(s.attrs, slog.Uint64(k, v)) }
func (s *slogFields) int(k string, v int)           { s.attrs = append(s.attrs, slog.Int(k, v)) }
func (s *slogFields) dur(k string, d time.Duration) { s.attrs = append(s.attrs, slog.Duration(k, d)) }
func (s *slogFields) time(k string, t time.Time)    { s.attrs = append(s.attrs, slog.Time(k, t)) }
func (s *slogFields) err(k string, err error)       { s.attrs = append(s.attrs, slog.Any(k, err)) }
