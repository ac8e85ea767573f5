package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Spec says how to start an instance.
type Spec struct {
	// Name is the instance's name: every event from the process is
	// recorded under it, whatever the event says. It must be unique in the
	// Cluster.
	Name string
	Path string
	Args []string
	// Env is the process's environment; nil means this process's.
	Env []string
	// StopByStdin: the instance stops when its standard input closes,
	// which Stop does, and which also happens when this process dies.
	// Otherwise it gets no input, and Stop sends SIGTERM.
	StopByStdin bool
	// ParentDeathSignal, if set, is sent to the instance when this process
	// dies, however it dies (Linux only).
	ParentDeathSignal os.Signal
}

// Proc is an instance running as a child process.
type Proc struct {
	c     *Cluster
	name  string
	cmd   *exec.Cmd
	stdin io.Closer // nil without Spec.StopByStdin
	done  chan struct{}

	mu       sync.Mutex
	asked    bool // to stop, or killed: its exit is expected
	exitedAt time.Time
	err      error
}

// Start starts an instance and reads its output until it exits.
func (c *Cluster) Start(s Spec) (*Proc, error) {
	if c.Proc(s.Name) != nil {
		return nil, fmt.Errorf("cluster: an instance called %q exists", s.Name)
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = s.Env
	setParentDeathSignal(cmd, s.ParentDeathSignal)
	p := &Proc{c: c, name: s.Name, cmd: cmd, done: make(chan struct{})}
	if s.StopByStdin {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		p.stdin = stdin
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	c.wg.Go(func() { p.run(stdout, stderr) })
	return p, nil
}

// run reads the process's output to the end, then waits for it and records
// its exit.
func (p *Proc) run(stdout, stderr io.Reader) {
	var readers sync.WaitGroup
	readers.Go(func() { p.read(stdout, true) })
	readers.Go(func() { p.read(stderr, false) })
	readers.Wait() // Wait closes the pipes: read them to the end first
	err := p.cmd.Wait()
	at := p.c.clock.Now()
	p.mu.Lock()
	p.exitedAt, p.err = at, err
	p.mu.Unlock()
	p.c.Add(Event{Kind: EvExited, Instance: p.name, T: at, Msg: errText(err)})
	close(p.done)
}

// read records r's lines until r ends: events if they are, log lines
// otherwise.
func (p *Proc) read(r io.Reader, events bool) {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if line = strings.TrimRight(line, "\r\n"); line != "" {
			var e Event
			if !events || json.Unmarshal([]byte(line), &e) != nil || e.Kind == "" {
				e = Event{Kind: EvLog, Msg: line}
			}
			e.Instance = p.name
			p.c.Add(e)
		}
		if err != nil {
			return
		}
	}
}

// Name returns the instance's name.
func (p *Proc) Name() string { return p.name }

// PID returns the process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Up reports whether the process runs and was neither asked to stop nor
// killed.
func (p *Proc) Up() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.asked && !p.Exited()
}

// Done is closed once the process exited and its exit is recorded.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether Done is closed.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Exit returns when the process exited, by the Cluster's clock, and how: the
// error of exec.Cmd.Wait. Both are zero until Done is closed.
func (p *Proc) Exit() (at time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedAt, p.err
}

// Stop asks the instance to stop, and returns without waiting: it closes
// its standard input (Spec.StopByStdin) or sends SIGTERM. A paused instance
// is resumed first.
func (p *Proc) Stop() error {
	p.mu.Lock()
	p.asked = true
	p.mu.Unlock()
	if p.Exited() {
		return nil
	}
	_ = p.Resume() // in case it is paused; an error means it is not
	if p.stdin != nil {
		if err := p.stdin.Close(); err != nil && !errors.Is(err, os.ErrClosed) { // closed: it exited
			return fmt.Errorf("close the stdin of %s: %w", p.name, err)
		}
		return nil
	}
	return p.terminate()
}

// Kill sends SIGKILL, and returns without waiting.
func (p *Proc) Kill() error {
	p.mu.Lock()
	p.asked = true
	p.mu.Unlock()
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	return nil
}

// Shutdown stops the instance and waits for it: Stop, then Kill if it has
// not exited within timeout. It returns an error if it had to kill it, or
// if the process exited with an error other than the SIGKILL of a Kill.
func (p *Proc) Shutdown(timeout time.Duration) error {
	if !p.Exited() {
		err := p.Stop()
		t := p.c.clock.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-p.done:
		case <-t.Chan():
			_ = p.Kill()
			<-p.done
			return errors.Join(fmt.Errorf("instance %s did not stop within %v", p.name, timeout), err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil && !(p.asked && killedBySIGKILL(p.err)) {
		return fmt.Errorf("instance %s: %w", p.name, p.err)
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
