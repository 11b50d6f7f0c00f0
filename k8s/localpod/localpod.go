// Package localpod is the pod driver that runs each pod as a local process of the demo
// agent (SPEC §2, §9): what `warmpool serve --dev` and `make run` use, so the whole
// service runs without a cluster. It imports only the root package.
package localpod

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/warmpool/warmpool"
)

// Defaults of Config.
const (
	DefaultProbeTimeout = 2 * time.Second
	DefaultStopGrace    = 2 * time.Second
	// readyPoll is how often Deploy asks a starting pod's health endpoint.
	readyPoll = 50 * time.Millisecond
	// stderrTail bounds the agent stderr kept for error messages.
	stderrTail  = 8 << 10
	stderrLines = 5
	stateExt    = ".json"
	// agentWord is the sub-command every local pod runs; /proc/<pid>/cmdline must
	// still contain it (and the pod name) before we trust or signal a recorded PID.
	agentWord  = "demo-agent"
	podNameEnv = "WARMPOOL_POD_NAME"
)

// Config configures the local driver.
type Config struct {
	// Binary is the program that runs the demo agent; default: this executable.
	Binary string
	// BinaryArgs come before the "demo-agent" word (e.g. flags of a wrapper).
	BinaryArgs []string
	// Env is added to every pod's environment (after the server's own, before the
	// scope's deploy.env).
	Env []string
	// StateDir holds one JSON file per pod, so server processes on one machine that
	// share it see one another's pods. Default: a fresh temporary directory, removed
	// by Close.
	StateDir string
	// Logger receives pod starts, readiness, failures and deletes; default slog.Default().
	Logger *slog.Logger
	// ProbeTimeout bounds one health request of Probe; default DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// StopGrace is how long a pod gets between SIGTERM and SIGKILL; default
	// DefaultStopGrace.
	StopGrace time.Duration
}

// Driver runs each pod as a local process of the demo agent on a free loopback port.
// Deploy receives a normalized spec (warmpool.ScopeConfig.Normalize) and fills no
// defaults. The image of the deploy spec is ignored, and so is its command: the binary
// is always Binary. Pods are process groups that die with the server (Pdeathsig on
// Linux); the registry of pods lives in StateDir.
type Driver struct {
	cfg     Config
	log     *slog.Logger
	tempDir bool // StateDir was made by New and is removed by Close
	tr      *http.Transport
	client  *http.Client

	// ctx ends when Close starts, cutting short every deploy still waiting.
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	procs   map[string]*podProc // pods this process started, by name
	closed  bool
	deploys sync.WaitGroup // Deploy calls in flight
	reapers sync.WaitGroup // one per started process
	deaths  []func(warmpool.Pod)
}

var (
	_ warmpool.PodDriver     = (*Driver)(nil)
	_ warmpool.DeathNotifier = (*Driver)(nil)
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

// record is the state file of one pod.
type record struct {
	Pod warmpool.Pod `json:"pod"`
	PID int          `json:"pid"`
	// OwnerPID is the server process that started the pod, for operators.
	OwnerPID int `json:"owner_pid"`
	// Ready is set once the pod's health endpoint answered 200.
	Ready   bool              `json:"ready"`
	Labels  map[string]string `json:"labels"`
	Created time.Time         `json:"created"`
	Args    []string          `json:"args"`
}

// New fills cfg's defaults and returns the driver. Close it to stop its pods.
func New(cfg Config) (*Driver, error) {
	if cfg.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local driver: find own executable: %w", err)
		}
		cfg.Binary = exe
	}
	tempDir := false
	if cfg.StateDir == "" {
		dir, err := os.MkdirTemp("", "warmpool-local-")
		if err != nil {
			return nil, fmt.Errorf("local driver: state dir: %w", err)
		}
		cfg.StateDir, tempDir = dir, true
	} else if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("local driver: state dir: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	// No keep-alives: probes are rare, pods come and go, and an idle connection would
	// hold goroutines (and a dead pod's socket) past Close. No proxy: pods are loopback.
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	ctx, cancel := context.WithCancel(context.Background())
	return &Driver{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "localpod"),
		tempDir: tempDir,
		tr:      tr,
		client:  &http.Client{Transport: tr},
		ctx:     ctx,
		cancel:  cancel,
		procs:   map[string]*podProc{},
	}, nil
}

// StateDir is the directory of the pod registry.
func (l *Driver) StateDir() string { return l.cfg.StateDir }

func (l *Driver) statePath(name string) string {
	return filepath.Join(l.cfg.StateDir, name+stateExt)
}

// Deploy starts the pod's process and waits until its health endpoint answers 200, at
// most Spec.ReadyTimeoutS. Errors: VALIDATION for a bad scope id or a ready timeout
// under a second (a spec that was not normalized); DEPLOY_FAILED when the pod name
// already exists in StateDir, the process cannot start, exits before it is ready (the message carries the
// last lines of its stderr) or is not ready in time, or the driver is closed; ctx.Err()
// when ctx ends first. Whatever was started is stopped and unregistered on failure.
func (l *Driver) Deploy(ctx context.Context, req warmpool.DeployRequest) (warmpool.Pod, error) {
	if err := ctx.Err(); err != nil {
		return warmpool.Pod{}, err
	}
	if err := warmpool.CheckScopeID(req.ScopeID); err != nil {
		return warmpool.Pod{}, err
	}
	if req.Spec.ReadyTimeoutS < 1 {
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeValidation, "deploy.ready_timeout_s: must be positive, got %d", req.Spec.ReadyTimeoutS)
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "local driver closed")
	}
	l.deploys.Add(1)
	l.mu.Unlock()
	defer l.deploys.Done()

	// Close cancels l.ctx; the deploy must stop waiting then too.
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()

	name := warmpool.PodName(req.ScopeID, req.Fence)
	// A cheap early check; the exclusive link below is the one that decides.
	if _, err := os.Stat(l.statePath(name)); err == nil {
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s already exists", name)
	}
	spec := req.Spec
	readyTimeout := time.Duration(spec.ReadyTimeoutS) * time.Second

	port, err := freePort()
	if err != nil {
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: no free port: %v", name, err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := slices.Concat(l.cfg.BinaryArgs, []string{
		agentWord, "--listen", addr, "--pod-name", name,
		"--sse-path", spec.SSEPath, "--health-path", spec.HealthPath,
	}, spec.Args)

	now := time.Now()
	pod := warmpool.Pod{
		ID:        name,
		ScopeID:   req.ScopeID,
		DeployVer: req.DeployVer,
		Fence:     req.Fence,
		Namespace: spec.Namespace,
		SSEURL:    "http://" + addr + spec.SSEPath,
		HealthURL: "http://" + addr + spec.HealthPath,
		CreatedAt: warmpool.UnixMs(now),
	}

	p, err := l.start(name, args, spec.Env)
	if err != nil {
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: start %s: %v", name, l.cfg.Binary, err)
	}
	log := l.log.With("pod", name, "pid", p.pid, "addr", addr)
	log.InfoContext(ctx, "pod process started")

	rec := &record{
		Pod:      pod,
		PID:      p.pid,
		OwnerPID: os.Getpid(),
		Labels: map[string]string{
			warmpool.LabelManagedBy: warmpool.ManagedByValue,
			warmpool.LabelScope:     req.ScopeID,
			warmpool.LabelDeployVer: req.DeployVer,
			warmpool.LabelFence:     strconv.FormatInt(req.Fence, 10),
		},
		Created: now,
		Args:    args,
	}
	if err := l.writeRecord(rec, true); err != nil {
		l.stop(context.Background(), p)
		if errors.Is(err, fs.ErrExist) {
			return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s already exists", name)
		}
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: register: %v", name, err)
	}
	l.mu.Lock()
	l.procs[name] = p
	l.mu.Unlock()
	req.Phase(warmpool.PhaseCreate)

	if err := l.awaitReady(dctx, p, pod, readyTimeout, req.Phase); err != nil {
		l.stop(context.Background(), p)
		l.removeRecord(name, p.pid)
		l.forget(p)
		switch {
		case l.ctx.Err() != nil:
			err = warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s: local driver closed", name)
		case ctx.Err() != nil:
			err = ctx.Err()
		}
		log.WarnContext(ctx, "pod deploy failed", "err", err)
		return warmpool.Pod{}, err
	}

	// Record readiness, unless a Delete took the pod away meanwhile.
	l.mu.Lock()
	cur, err := l.readRecord(name)
	still := err == nil && cur.PID == p.pid
	if still {
		rec.Ready = true
		still = l.writeRecord(rec, false) == nil
	}
	l.mu.Unlock()
	if !still {
		l.stop(context.Background(), p)
		l.removeRecord(name, p.pid)
		l.forget(p)
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s was deleted before it became ready", name)
	}
	log.InfoContext(ctx, "pod ready", "after", time.Since(now).Round(time.Millisecond))
	req.Phase(warmpool.PhaseReady)
	pod.Ready = true
	return pod, nil
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

// OnDeath makes the driver report to fn each of its own pods whose process ends
// (killed, crashed, or stopped by Delete), as it is reaped. Pods of other server
// processes sharing StateDir are seen dead by List only.
func (l *Driver) OnDeath(fn func(warmpool.Pod)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.deaths = append(l.deaths[:len(l.deaths):len(l.deaths)], fn)
}

// reportExit hands a pod whose process was reaped to the OnDeath functions, if it is
// a pod of this driver (the process of a deploy in flight is not a pod yet).
func (l *Driver) reportExit(p *podProc) {
	l.mu.Lock()
	owned, deaths := l.procs[p.name] == p, l.deaths
	l.mu.Unlock()
	if !owned || len(deaths) == 0 {
		return
	}
	rec, err := l.readRecord(p.name)
	if err != nil || rec.PID != p.pid {
		return
	}
	pod := rec.Pod
	pod.Ready, pod.Dead = false, p.exitReason()
	for _, fn := range deaths {
		fn(pod)
	}
}

// forget drops p from the processes of this driver, once it is stopped.
func (l *Driver) forget(p *podProc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.procs[p.name] == p {
		delete(l.procs, p.name)
	}
}

// awaitReady polls the health endpoint until it answers 200 for this pod. The first
// answer of any kind is the started phase: the process listens.
func (l *Driver) awaitReady(ctx context.Context, p *podProc, pod warmpool.Pod, timeout time.Duration, phase func(string)) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(readyPoll)
	defer tick.Stop()
	started := false
	for {
		last := l.health(ctx, pod, min(l.cfg.ProbeTimeout, time.Second))
		if !started && (last == nil || errors.As(last, new(notReady))) {
			started = true
			phase(warmpool.PhaseStarted)
		}
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s exited before it became ready (%s)%s",
				pod.ID, p.exitReason(), p.stderr.lastLines(stderrLines))
		case <-deadline.C:
			return warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s not ready within %s: %v%s",
				pod.ID, timeout, last, p.stderr.lastLines(stderrLines))
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// health asks the pod's health endpoint once. The demo agent names its pod in the
// answer; a different name means the port now belongs to another pod.
func (l *Driver) health(ctx context.Context, pod warmpool.Pod, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, pod.HealthURL, nil)
	if err != nil {
		return err
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return notReady(fmt.Sprintf("health answered %d", resp.StatusCode))
	}
	var v struct {
		Pod string `json:"pod"`
	}
	if json.Unmarshal(body, &v) == nil && v.Pod != "" && v.Pod != pod.ID {
		return fmt.Errorf("health answered for pod %q", v.Pod)
	}
	return nil
}

// notReady is a health answer other than 200: the pod's process listens but does not
// serve yet.
type notReady string

func (e notReady) Error() string { return string(e) }

// Probe asks the pod's health endpoint once, within ProbeTimeout; nil means healthy.
func (l *Driver) Probe(ctx context.Context, pod warmpool.Pod) error {
	if err := l.health(ctx, pod, l.cfg.ProbeTimeout); err != nil {
		return fmt.Errorf("probe %s: %w", pod.ID, err)
	}
	return nil
}

// Delete stops the pod's process group (SIGTERM, then SIGKILL after StopGrace), waits
// for it and removes its state file. A pod another server process started is signalled
// by PID, but only while /proc still shows that PID running the pod's demo agent. A
// missing pod is not an error.
func (l *Driver) Delete(ctx context.Context, pod warmpool.Pod) error {
	name := pod.ID
	if !warmpool.ValidPodID(name) {
		return nil // no file of ours can have such a name (and it must not reach a path)
	}
	l.mu.Lock()
	p := l.procs[name]
	l.mu.Unlock()
	rec, err := l.readRecord(name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	switch {
	case p != nil && (rec == nil || rec.PID == p.pid):
		l.stop(ctx, p)
		l.removeRecord(name, p.pid)
		l.forget(p)
	case rec != nil:
		if err := l.stopForeign(ctx, rec.PID, name); err != nil {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		l.removeRecord(name, rec.PID)
	default:
		return nil
	}
	l.log.InfoContext(ctx, "pod deleted", "pod", name)
	return nil
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

// List reads every state file and reports each pod with Ready and Dead filled: a pod
// whose process is gone, or whose PID now runs something else, is Dead.
func (l *Driver) List(ctx context.Context) ([]warmpool.Pod, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(l.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("list local pods: %w", err)
	}
	l.mu.Lock()
	own := maps.Clone(l.procs)
	l.mu.Unlock()

	seen := map[string]bool{}
	var pods []warmpool.Pod
	for _, e := range entries {
		fname := e.Name()
		name, ok := strings.CutSuffix(fname, stateExt)
		if !ok || strings.HasPrefix(fname, ".") || e.IsDir() {
			continue // temporary files start with a dot
		}
		rec, err := l.readRecord(name)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) { // a file deleted meanwhile is just gone
				l.log.Warn("unreadable pod state file", "file", fname, "err", err)
			}
			continue
		}
		if rec.Labels[warmpool.LabelManagedBy] != warmpool.ManagedByValue {
			continue
		}
		seen[name] = true
		pod := rec.Pod
		if p := own[name]; p != nil && p.pid == rec.PID {
			// Our own child: we know whether it has been reaped and how it ended.
			if p.hasExited() {
				pod.Dead = p.exitReason()
			}
		} else if alive, why := procAlive(rec.PID, name); !alive {
			pod.Dead = why
		}
		pod.Ready = rec.Ready && pod.Dead == ""
		pods = append(pods, pod)
	}
	// Our children that another server deleted leave no file behind: forget them.
	l.mu.Lock()
	for name, p := range own {
		if !seen[name] && p.hasExited() && l.procs[name] == p {
			delete(l.procs, name)
		}
	}
	l.mu.Unlock()
	warmpool.SortPods(pods)
	return pods, nil
}

// Close stops every pod this driver started (deploys in flight fail), waits for all of
// them and removes their state files. Pods of other server processes are left alone.
// It is safe to call more than once.
func (l *Driver) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()

	l.cancel()
	l.deploys.Wait() // each failing deploy stops its own process

	l.mu.Lock()
	procs := slices.Collect(maps.Values(l.procs))
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			l.stop(context.Background(), p)
			l.removeRecord(p.name, p.pid)
			l.forget(p)
		})
	}
	wg.Wait()
	l.reapers.Wait()
	l.tr.CloseIdleConnections()
	if l.tempDir {
		if err := os.RemoveAll(l.cfg.StateDir); err != nil {
			return fmt.Errorf("local driver: remove state dir: %w", err)
		}
	}
	return nil
}

// readRecord reads the state file of pod name.
func (l *Driver) readRecord(name string) (*record, error) {
	b, err := os.ReadFile(l.statePath(name))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", l.statePath(name), err)
	}
	return &rec, nil
}

// writeRecord writes rec's state file whole, through a temporary file, so a reader
// never sees half a record. With exclusive set it fails with fs.ErrExist when the pod's
// file already exists: a hard link, unlike a rename, never replaces its target, which
// makes it the cross-process "create if absent" that the name check needs.
func (l *Driver) writeRecord(rec *record, exclusive bool) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(l.cfg.StateDir, "."+rec.Pod.ID+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() { _ = os.Remove(tmp) }() // after a link or a rename this is a no-op or drops the spare name
	if _, err := f.Write(append(b, '\n')); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Close(); err != nil {
		return err
	}
	if exclusive {
		return os.Link(tmp, l.statePath(rec.Pod.ID))
	}
	return os.Rename(tmp, l.statePath(rec.Pod.ID))
}

// removeRecord removes the state file of pod name if it still describes pid, so a
// late cleanup never removes a newer pod's file.
func (l *Driver) removeRecord(name string, pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec, err := l.readRecord(name)
	if err != nil || rec.PID != pid {
		return
	}
	if err := os.Remove(l.statePath(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.log.Warn("remove pod state file", "pod", name, "err", err)
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
