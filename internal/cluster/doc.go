// Package cluster runs instances of an application as child processes for
// the integration tests and the CLI's demo, records what they report, and
// checks what every such run promises: no two leader terms overlapped, no
// cron firing ran twice.
//
//	c := cluster.New(clockwork.NewRealClock())
//	p, err := c.Start(cluster.Spec{Name: "app1", Path: exe, Args: []string{"demo-instance", "--events"}})
//	...
//	lead, err := c.Await(ctx, 0, 1, cluster.IsKind(cluster.EvLead))
//	err = p.Kill()
//	...
//	terms := cluster.LeaderTerms(c.Events(), time.Now())
//	if bad := cluster.Overlaps(terms); len(bad) > 0 { ... }
//
// An instance reports Events as JSON lines on its standard output (Encoder
// writes them). Start reads both output streams: a line that is not an event,
// on either, is recorded as a log event; every event is recorded under the
// instance's name, in the order of arrival. When the process ends, the
// Cluster records an exited event. Whoever drives the instances adds events
// of its own with Add (the demo records its kills and stops), and in-process
// instances report through Add too.
//
// Times: an event's T is the wall clock of whoever wrote it; the processes
// share a machine, hence a clock, so T orders events across processes.
// Received is the driver's clock when the event was recorded, for durations
// the driver measures itself.
//
// What it does not do: choose the server, build the instances, or decide
// what a scenario expects. The integration tests re-execute their test
// binary as their instances, with knobs no user needs (skewed clocks, fenced
// writes, late renewals); the demo runs its own program as demo-instance.
// Both speak this package's events.
//
// Signals: Stop asks an instance to stop by closing its standard input
// (Spec.StopByStdin: works everywhere) or by SIGTERM; Kill sends SIGKILL.
// Pause and Resume (SIGSTOP, SIGCONT), SIGTERM and Signal (signals an
// instance handles itself, to steer it) need Unix; elsewhere they return
// errors.ErrUnsupported. Only Linux can make a child get a signal
// when its parent dies (Spec.ParentDeathSignal).
package cluster
