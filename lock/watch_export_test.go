package lock

// WatchReaders returns how many watched locks have a reader running.
func WatchReaders(l *Locker) int { return l.watches.pollers() }
