package local

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// podProc is one pod process started by this Driver.
type podProc struct {
	name   string
	pid    int
	stderr *tailBuffer
	exited chan struct{} // closed once the process has been reaped
	err    error         // how it exited; set before exited closes
}

func (p *podProc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *podProc) exitReason() string {
	if p.err == nil {
		return "process exited: exit status 0"
	}
	return "process exited: " + p.err.Error()
}

// start launches the agent process in its own process group and reaps it when it ends.
// The caller registers it in l.procs once it owns the pod's name; until then the
// process is the deploy's alone to stop (Close waits for every Deploy first).
func (l *Driver) start(name string, args []string, specEnv map[string]string) (*podProc, error) {
	cmd := exec.Command(l.cfg.Binary, args...)
	env := slices.Concat(os.Environ(), l.cfg.Env)
	for _, k := range slices.Sorted(maps.Keys(specEnv)) {
		env = append(env, k+"="+specEnv[k])
	}
	cmd.Env = append(env, podNameEnv+"="+name)
	p := &podProc{name: name, stderr: &tailBuffer{max: stderrTail}, exited: make(chan struct{})}
	cmd.Stderr = p.stderr
	// A grandchild that keeps stderr open must not keep Wait (and Close) waiting.
	cmd.WaitDelay = time.Second
	cmd.SysProcAttr = sysProcAttr()

	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.pid = cmd.Process.Pid
	l.reapers.Add(1)
	go func() {
		defer l.reapers.Done()
		p.err = cmd.Wait() // reaps the child: no zombies
		close(p.exited)
		l.reportExit(p)
	}()
	return p, nil
}

// reportExit hands a pod whose process was reaped to the OnPodEvent functions, dead, if
// it is a pod of this driver (the process of a deploy in flight is not a pod yet).
func (l *Driver) reportExit(p *podProc) {
	l.mu.Lock()
	owned, events := l.procs[p.name] == p, l.events
	l.mu.Unlock()
	if !owned || len(events) == 0 {
		return
	}
	rec, err := l.readRecord(p.name)
	if err != nil || rec.PID != p.pid {
		return
	}
	pod := rec.Pod
	pod.Ready, pod.Dead = false, p.exitReason()
	l.report(pod, false)
}

// forget drops p from the processes of this driver, once it is stopped.
func (l *Driver) forget(p *podProc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.procs[p.name] == p {
		delete(l.procs, p.name)
	}
}

// stop ends one of our own processes and waits until it is reaped. A ctx that ends
// during the grace period only makes the SIGKILL come sooner.
func (l *Driver) stop(ctx context.Context, p *podProc) {
	if !p.hasExited() {
		_ = killGroup(p.pid, syscall.SIGTERM)
		grace := time.NewTimer(l.cfg.StopGrace)
		select {
		case <-p.exited:
		case <-grace.C:
		case <-ctx.Done():
		}
		grace.Stop()
	}
	// Also after the leader exited: whatever else is left in its group goes too.
	_ = killGroup(p.pid, syscall.SIGKILL)
	<-p.exited
}

// stopForeign ends a pod process another server started; its owner reaps it, so we
// watch /proc until the process is gone (a zombie counts as gone).
func (l *Driver) stopForeign(ctx context.Context, pid int, name string) error {
	if alive, _ := procAlive(pid, name); !alive {
		return nil
	}
	_ = killGroup(pid, syscall.SIGTERM)
	graceCtx, cancel := context.WithTimeout(ctx, l.cfg.StopGrace)
	defer cancel()
	if waitGone(graceCtx, pid, name) {
		return nil
	}
	// Check again right before the SIGKILL: the PID may have been reused meanwhile.
	if alive, _ := procAlive(pid, name); alive {
		_ = killGroup(pid, syscall.SIGKILL)
	}
	killCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !waitGone(killCtx, pid, name) {
		return fmt.Errorf("pid %d still running after SIGKILL", pid)
	}
	return nil
}

// waitGone polls until the process is gone or ctx ends; it reports whether it is gone.
func waitGone(ctx context.Context, pid int, name string) bool {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if alive, _ := procAlive(pid, name); !alive {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// freePort asks the kernel for a free loopback port. Another process may take it
// before the agent binds it; the agent then exits and the deploy fails, and the health
// check's pod name guards against reaching someone else's agent.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// killGroup signals the process group led by pid.
func killGroup(pid int, sig syscall.Signal) error {
	if pid <= 1 {
		return fmt.Errorf("refusing to signal pid %d", pid)
	}
	return syscall.Kill(-pid, sig)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// lastLines formats the last n non-empty lines for an error message, or "" if none.
func (t *tailBuffer) lastLines(n int) string {
	t.mu.Lock()
	text := string(bytes.TrimSpace(t.buf))
	t.mu.Unlock()
	if text == "" {
		return ""
	}
	lines := strings.Split(text, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "; stderr: " + strings.Join(lines, " | ")
}
