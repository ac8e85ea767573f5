// Package integration holds mongolock's end-to-end tests and the benchmarks
// quoted in the README. It has no API: everything is in its _test.go files.
//
// The tests run complete instances (migrations, a LeaderAwareRunner with a
// long leader task, and a scheduler with "@every 1s" jobs, each instance with
// its own client and keeper id) against one server, most of them as child
// processes so that SIGKILL and SIGSTOP mean what they mean in production:
// the test binary re-executes itself as an instance, and the instance reports
// what it does as JSON lines on its standard output. The tests then check the
// properties a user relies on against those reports and the database: no two
// leaders' terms overlap, every cron firing runs at most once (exactly once
// while instances are up, even when the instance that claimed it is killed
// or stopped before starting it), firings missed while no instance was up
// are caught up as the job's policy says and the others recorded as not
// run, a job paused from the command line stays paused on every instance,
// migrations run once however many instances deploy, and a leader that
// loses its lease stops before anyone else starts. The scheduler's
// scenarios run twice: with every clock right, and with clocks 400 ms
// ahead and behind.
// Package internal/cluster runs the processes, records their reports and
// holds the checks; the CLI's demo uses it too.
//
// # Backends
//
//   - MONGODB_URI, if set.
//   - Otherwise, when a Docker engine answers, a MongoDB 7 single-node replica
//     set started with testcontainers-go (so write concern majority and
//     replSetStepDown are real).
//   - Otherwise the embedded FerretDB of internal/mongotest.
//
// The run prints the backend it chose. A scenario that needs a feature the
// backend lacks (a replica set, a server the test can stop, a fault proxy)
// skips and says why.
//
// # Commands
//
//	go test ./integration/                          # the scenarios, about a minute and a half
//	go test ./integration/ -integration.long        # longer variants
//	go test -run '^$' -bench . ./integration/       # the figures of the README
//
// The tests need a Unix system (signals, re-executing the test binary).
package integration
