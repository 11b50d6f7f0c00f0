// Package local is the pod driver that runs each pod as a local process of the demo
// agent (SPEC §2, §9): what `warmpool serve --dev` and `make run` use, so the whole
// service runs without a cluster. It imports only the root package.
package local

import (
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
	"slices"
	"strconv"
	"sync"
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
	// SecretsFile is where ReadSecret reads secrets from (driver.Secrets); "" for none.
	SecretsFile string
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
	events  []func(warmpool.PodEvent)
	// watchers is the watch of the state directory (watchDir), from the first
	// OnPodEvent until Close.
	watchers sync.WaitGroup
}

var (
	_ warmpool.PodDriver   = (*Driver)(nil)
	_ warmpool.PodNotifier = (*Driver)(nil)
)

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
		log:     cfg.Logger.With("component", "local"),
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

	p, err := l.start(name, args, req.WithAgentEnv(spec.PlainEnv(), name))
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
	l.report(pod, false)
	req.Phase(warmpool.PhaseCreate)

	if err := l.awaitReady(dctx, p, pod, readyTimeout, req.Phase); err != nil {
		l.stop(context.Background(), p)
		l.removeRecord(name, p.pid)
		l.forget(p)
		l.report(pod, true)
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
		l.report(pod, true)
		return warmpool.Pod{}, warmpool.Errorf(warmpool.CodeDeployFailed, "pod %s was deleted before it became ready", name)
	}
	log.InfoContext(ctx, "pod ready", "after", time.Since(now).Round(time.Millisecond))
	req.Phase(warmpool.PhaseReady)
	pod.Ready = true
	l.report(pod, false)
	return pod, nil
}

// OnPodEvent makes the driver report to fn every pod of its state directory, at once
// (as a watch's initial list does), then each change of its own pods as it happens: a
// deploy's process as it starts, becomes ready, and when a failed deploy removes it; a
// process that ends (killed, crashed, or stopped by Delete) as it is reaped; a pod that
// Delete removed, its own or another server's. What other server processes sharing
// StateDir do to their pods, and the death of a pod whose server died, is reported
// from a watch of the directory (every WatchPeriod, until Close), so the events tell
// of every pod a List shows.
func (l *Driver) OnPodEvent(fn func(warmpool.PodEvent)) {
	l.mu.Lock()
	first := len(l.events) == 0 && !l.closed
	l.events = append(l.events[:len(l.events):len(l.events)], fn)
	if first {
		l.watchers.Add(1)
	}
	l.mu.Unlock()
	pods, err := l.List(context.Background())
	if err != nil {
		l.log.Warn("local driver: pods not listed for a new event function", "err", err)
	}
	seen := make(map[string]warmpool.Pod, len(pods))
	for _, p := range pods {
		seen[p.ID] = p
		fn(warmpool.PodEvent{Pod: p})
	}
	if first {
		go l.watchDir(seen)
	}
}

// report hands an event of pod to the OnPodEvent functions; a gone pod is reported
// Dead and not Ready.
func (l *Driver) report(pod warmpool.Pod, gone bool) {
	l.mu.Lock()
	events := l.events
	l.mu.Unlock()
	if gone {
		pod.Ready = false
		if pod.Dead == "" {
			pod.Dead = "deleted"
		}
	}
	for _, fn := range events {
		fn(warmpool.PodEvent{Pod: pod, Gone: gone})
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
		// A pod its server's Close stopped has no process left to stop.
		if !rec.Stopped {
			if err := l.stopForeign(ctx, rec.PID, name); err != nil {
				return fmt.Errorf("delete %s: %w", name, err)
			}
		}
		l.removeRecord(name, rec.PID)
	default:
		return nil
	}
	gone := pod
	if rec != nil {
		gone = rec.Pod
	}
	l.report(gone, true)
	l.log.InfoContext(ctx, "pod deleted", "pod", name)
	return nil
}

// Close stops every pod this driver started (deploys in flight fail) and waits for all
// of them. It leaves their state files, marked stopped, as a server killed leaves
// them: the other server processes sharing StateDir see them dead at their next look
// and bury them (in Redis, then with Delete, which removes the file). Were the files
// removed, a pod started and stopped between two of their looks (WatchPeriod) would
// never be reported to them, and would stay in Redis, a pod that is not there, until
// a full pass purged it as a ghost. Pods of other server processes are left alone. A
// temporary StateDir is removed whole. It is safe to call more than once.
func (l *Driver) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()

	l.cancel()
	l.watchers.Wait()
	l.deploys.Wait() // each failing deploy stops its own process

	l.mu.Lock()
	procs := slices.Collect(maps.Values(l.procs))
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(func() {
			l.stop(context.Background(), p)
			l.markStopped(p.name, p.pid)
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
