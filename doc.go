// Package mongolock is the root of the mongolock module: pessimistic
// locks, leader election and cron jobs that run once per firing
// cluster-wide, for Go services that already run on MongoDB (driver
// go.mongodb.org/mongo-driver/v2). It has no API of its own; its example
// is the program the README starts with. The packages:
//
//   - [github.com/mongolock/mongolock/lock]: leases with fencing tokens.
//     One Session per process owns the keeper id and keeps every lease
//     alive; Do, Mutex, AcquireLocks.
//   - [github.com/mongolock/mongolock/runner]: leader election; a task
//     runs only while this instance holds the lock.
//   - [github.com/mongolock/mongolock/scheduler]: cron jobs, each firing
//     run at most once across the cluster, taken over when its claimant
//     dies.
//   - [github.com/mongolock/mongolock/migrations]: index migrations
//     applied once at deploy, however many instances start at once.
//   - [github.com/mongolock/mongolock/metrics],
//     [github.com/mongolock/mongolock/tracing] and
//     [github.com/mongolock/mongolock/health]: Prometheus metrics,
//     OpenTelemetry spans, and liveness, readiness and leader checks.
//   - [github.com/mongolock/mongolock/locktest]: an in-memory lock store
//     for unit tests; [github.com/mongolock/mongolock/devserver]: an
//     embedded server for integration tests.
//   - [github.com/mongolock/mongolock/cli] and
//     [github.com/mongolock/mongolock/ui]: the command line and the
//     dashboard, to build into your own program.
package mongolock
