// Package ui is mongolock's dashboard: an http.Handler that shows what
// MongoDB knows of a cluster — the instances up (their presence leases),
// the current leaders and their terms, every lock with its holder, fencing
// token and expiry by the server's clock (leader candidates and semaphore
// slots by their kind, the slots also grouped by semaphore), the jobs with their spec, next
// firings and pause state, each job's firings as a picture and a paged
// history, and the migrations — and updates the pages live.
//
//	h, err := ui.New(db) // read-only
//	mux.Handle("/", h)   // or ui.WithPrefix("/mongolock") and mux.Handle("/mongolock/", h)
//
// It reads MongoDB alone: any instance, or an operator's laptop
// (`mongolock ui`), can serve it, whether or not a scheduler runs there.
//
// # What it promises
//
//   - One reader per Handler, and a bounded cost per refresh for all
//     viewers together, whatever the URLs: the pages read a fixed set of
//     shared snapshots (the lock snapshot — the first 1 000 held locks by
//     id and up to 1 000 instances' presence locks —, the recent terms,
//     the jobs to look at, the recent problems, the migrations), each at
//     most once per refresh interval (WithRefresh), and at most 64 readings
//     of one item a URL names (a job's record, a page of its history or of
//     the jobs, a lock's terms, actions or holder, a page of the locks past
//     the snapshot) per interval. The snapshots cost about 15 commands
//     together, an item reading one or two (a lock read by id reads the
//     server's clock too), so a refresh interval costs the database at most
//     about 15 + 2×64 commands, however many viewers ask for however many
//     pages (TestReadsPerRefreshBounded counts them). Failed
//     readings and misses (an unknown job or lock) are kept for the
//     interval like the others; a lock the snapshot covers, held or not,
//     costs no read of its own. Past the 64, a page whose item was not
//     read in the interval answers 503 with Retry-After, reading nothing.
//     The pages' script polls the page's live part, and viewers within one
//     interval share one reading. A reading reads a bounded number of
//     documents: the jobs and history tables and the locks page are paged
//     by key (no skip over earlier pages), the timeline shows the last
//     DefaultTimelineSize firings. On MongoDB they use the indexes
//     mongolock's migrations create (jobs by _id, history by job and
//     firing, recent history by end, terms by start, locks by _id), but for
//     the overview's list of jobs to look at, which scans the jobs
//     collection (a document per job).
//   - With more than 1 000 held locks, the overview's "about to expire"
//     is of the lock snapshot (the overview says so and links to
//     /locks?late=1, which pages through them all), an election's lock
//     past it is read by id (an item reading), and the locks page scans
//     1 000 locks a page and pages by id.
//   - Read-only unless WithActions: without it there is no action endpoint
//     at all. With it, pause (with a note and an end), resume, trigger,
//     remove and force-release are each allowed or refused by the hook,
//     which names the operator (SetOperator); each is recorded with that
//     name in DefaultActionsCollection and shows in the job's history. Every
//     form carries a token signed with a per-Handler key (WithCSRFKey to
//     share one between replicas) and bound to a SameSite=Strict cookie, and
//     cross-origin POSTs are refused (http.CrossOriginProtection).
//   - No secret is rendered: text read from the database (errors of runs
//     and migrations, notes, keeper, lock and job ids, operators' names)
//     passes through RedactURIs (and WithRedact) where it is read, which
//     hides the credentials of any URI by their place in it, never by
//     knowing a secret. A lock or job whose id holds a URI is shown and
//     linked by its redacted id: its page shows what the list does, and
//     actions on it are refused (not found).
//   - A document that is not what the module writes (lock.BadDocument),
//     in any collection, never fails a page: the reading skips it and goes
//     on, and the Handler's log (WithLogger) warns of it once per document
//     and field ("skipped a bad document": collection, id, field,
//     problem). A job whose document cannot be read shows its history and
//     says why; an unreadable migration record shows as "record
//     unreadable".
//   - Links to a job's or a lock's page cannot lead to another page,
//     whatever the name (".." and "." segments, escapes, slashes).
//   - Mount it in an http.Server with timeouts (DefaultServerReadTimeout
//     and the others): it sets none itself.
//   - Static files are embedded; the pages need no CDN and no build step,
//     and load only their own script and styles (a strict
//     Content-Security-Policy). No outcome is told by colour alone: each
//     has a shape and a label; every control is reachable by keyboard, and
//     live updates can be paused.
//
// What it does not do: authenticate (bring your hook, or a proxy in front
// of it), or show what MongoDB does not hold. Elections show only with a
// term log (runner.TermLog on the runners' Sessions); a lock's terms are
// the term log's for elections, the run history's for job locks, and only
// the current one for other locks. Runs that were started and whose
// instance died before recording the end have no history record: the
// timeline shows them as "spent", firings of the spec with no record
// between recorded ones.
//
// # Backends
//
// On FerretDB 1.x (the embedded server of the tests and the demo) every
// query but a lone _id equality reads the whole collection: pages over a
// large history take seconds there (see docs/benchmarks.md). Its TTL
// indexes are plain indexes, so the term log and the history grow until
// purged.
package ui
