package metrics

import (
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mongolock/mongolock/lock"
	"github.com/mongolock/mongolock/scheduler"
)

// Outcomes of a firing (label outcome of job_firings_total).
const (
	outcomeSucceeded        = "succeeded"
	outcomeFailed           = "failed"
	outcomeSkipped          = "skipped"
	outcomeClaimedElsewhere = "claimed_elsewhere"
)

// skipReasons maps the prefixes of FiringSkipped reasons to the values of
// the reason label; any other reason is "other".
var skipReasons = [...]struct{ prefix, label string }{
	{scheduler.ReasonBusy, "busy"},
	{scheduler.ReasonSetupPending, "setup_pending"},
	{scheduler.ReasonLockHeld, "lock_held"},
	{scheduler.ReasonUntrusted, "untrusted"},
	{scheduler.ReasonNoLock, "no_lock"},
	{scheduler.ReasonNoStart, "no_start"},
	{scheduler.ReasonNoClaim, "no_claim"},
	{scheduler.ReasonStopping, "stopping"},
	{scheduler.ReasonBehind, "behind"},
	{scheduler.ReasonMisfired, "misfired"},
	{scheduler.ReasonPaused, "paused"},
	{scheduler.ReasonRemoved, "removed"},
	{scheduler.ReasonTakenOver, "taken_over"},
	{scheduler.ReasonAbsent, "absent"},
	{scheduler.ReasonOverloaded, "overloaded"},
}

// Actions of job_control_total, by event.
var controlActions = [...]struct {
	kind  lock.EventKind
	label string
}{
	{lock.JobPaused, "pause"},
	{lock.JobResumed, "resume"},
	{lock.JobTriggered, "trigger"},
	{lock.JobRemoved, "remove"},
}

const skipOther = len(skipReasons) // index of "other"

// skipIndex returns the index in skipReasons of reason's label.
func skipIndex(reason string) int {
	for i, r := range skipReasons {
		if strings.HasPrefix(reason, r.prefix) {
			return i
		}
	}
	return skipOther
}

func skipLabel(i int) string {
	if i == skipOther {
		return "other"
	}
	return skipReasons[i].label
}

// JobLister is what WatchScheduler needs: *scheduler.Scheduler is one.
type JobLister interface {
	JobNames() []string
}

var _ JobLister = (*scheduler.Scheduler)(nil)

type jobMetrics struct {
	firings     *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	lateness    *prometheus.HistogramVec
	lastSuccess *prometheus.GaugeVec
	failures    *prometheus.GaugeVec
	retries     *prometheus.CounterVec
	takeovers   *prometheus.CounterVec
	control     *prometheus.CounterVec
	superseded  *prometheus.GaugeVec

	all sync.Map // job name → *job

	mu      sync.Mutex
	listers []JobLister
}

// job is the series of one job.
type job struct {
	succeeded, failed, claimedElsewhere prometheus.Counter
	skipped                             [len(skipReasons) + 1]prometheus.Counter
	duration, lateness                  prometheus.Observer
	lastSuccess, failures, superseded   prometheus.Gauge
	retries, takeovers                  prometheus.Counter
	control                             [len(controlActions)]prometheus.Counter
}

func (j *jobMetrics) init(m *Metrics, cfg config) {
	j.firings = m.counter("job_firings_total",
		"Firings of a job tried on this instance, by outcome: succeeded, failed, skipped (with a reason), claimed_elsewhere.",
		"job_name", "outcome", "reason")
	j.duration = m.histogram("job_run_duration_seconds", "Duration of the job's runs on this instance.", cfg.duration, "job_name")
	j.lateness = m.histogram("job_start_lateness_seconds",
		"Start of the job's runs on this instance minus their scheduled time; its count is the runs started.",
		cfg.duration, "job_name")
	j.lastSuccess = m.gauge("job_last_success_timestamp_seconds",
		"Unix time of the end of the job's last successful run on this instance; 0 if none since it started.", "job_name")
	j.failures = m.gauge("job_consecutive_failures",
		"Runs of the job on this instance that failed since its last successful run.", "job_name")
	j.retries = m.counter("job_retries_total",
		"Failed attempts of the job's firings on this instance that were retried under the same lease.", "job_name")
	j.takeovers = m.counter("job_takeovers_total",
		"Claims of the job this instance took over from a claimant that did not start their work before its lease lapsed.", "job_name")
	j.control = m.counter("job_control_total",
		"Control actions on the job through this instance's scheduler, by action: pause (also after too many failures), resume, trigger (a request made), remove.",
		"job_name", "action")
	j.superseded = m.gauge("job_spec_superseded",
		"1 while another instance registered the job with another spec since this instance did: the cluster follows that one, and this instance does not fire the job.",
		"job_name")
}

// get returns the series of job name, creating them at zero.
func (j *jobMetrics) get(name string) *job {
	if x, ok := j.all.Load(name); ok {
		return x.(*job)
	}
	key := name
	name = labelValue(name)
	x := &job{
		succeeded:        j.firings.WithLabelValues(name, outcomeSucceeded, ""),
		failed:           j.firings.WithLabelValues(name, outcomeFailed, ""),
		claimedElsewhere: j.firings.WithLabelValues(name, outcomeClaimedElsewhere, ""),
		duration:         j.duration.WithLabelValues(name),
		lateness:         j.lateness.WithLabelValues(name),
		lastSuccess:      j.lastSuccess.WithLabelValues(name),
		failures:         j.failures.WithLabelValues(name),
		retries:          j.retries.WithLabelValues(name),
		takeovers:        j.takeovers.WithLabelValues(name),
		superseded:       j.superseded.WithLabelValues(name),
	}
	for i := range x.skipped {
		x.skipped[i] = j.firings.WithLabelValues(name, outcomeSkipped, skipLabel(i))
	}
	for i, a := range controlActions {
		x.control[i] = j.control.WithLabelValues(name, a.label)
	}
	// Two callers may build the same children; they are the same series.
	got, _ := j.all.LoadOrStore(key, x)
	return got.(*job)
}

func (j *jobMetrics) observe(e lock.Event) {
	if e.Job == "" {
		return
	}
	x := j.get(e.Job)
	switch e.Kind {
	case lock.FiringLost:
		x.claimedElsewhere.Inc()
	case lock.FiringSkipped:
		x.skipped[skipIndex(e.Reason)].Inc()
	case lock.RunStarted:
		// Retries are counted from RunRetrying, not from RunStarted's
		// Attempt.
		x.lateness.Observe(e.Lateness.Seconds())
	case lock.RunRetrying:
		x.retries.Inc()
	case lock.FiringTakenOver:
		x.takeovers.Inc()
	case lock.JobSpecSuperseded:
		x.superseded.Set(1)
	case lock.JobSpecRestored:
		x.superseded.Set(0)
	case lock.JobPaused, lock.JobResumed, lock.JobTriggered, lock.JobRemoved:
		for i, a := range controlActions {
			if a.kind == e.Kind {
				x.control[i].Inc()
			}
		}
	case lock.RunEnded:
		x.duration.Observe(e.Took.Seconds())
		if e.Outcome == string(scheduler.OutcomeSucceeded) {
			x.succeeded.Inc()
			x.failures.Set(0)
			x.lastSuccess.Set(float64(e.At.UnixNano()) / 1e9)
		} else {
			x.failed.Inc()
			x.failures.Inc()
		}
	}
}

// refresh adds the jobs of the watched schedulers.
func (j *jobMetrics) refresh() {
	j.mu.Lock()
	listers := j.listers
	j.mu.Unlock()
	for _, l := range listers {
		for _, name := range l.JobNames() {
			j.get(name)
		}
	}
}

// AddJobs makes the series of the jobs named present at zero, so that
// alerts on a job that never ran work. A job is added by itself at its
// first event.
func (m *Metrics) AddJobs(names ...string) {
	for _, n := range names {
		if n != "" {
			m.jobs.get(n)
		}
	}
}

// WatchScheduler adds the jobs of s (AddJobs), now and at every scrape,
// so jobs added to s later are present from the start too. Pass a
// *scheduler.Scheduler.
func (m *Metrics) WatchScheduler(s JobLister) {
	m.AddJobs(s.JobNames()...)
	m.jobs.mu.Lock()
	m.jobs.listers = append(m.jobs.listers, s)
	m.jobs.mu.Unlock()
}
