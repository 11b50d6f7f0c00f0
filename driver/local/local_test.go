package local_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/demoagent"
	"github.com/warmpool/warmpool/driver/drivertest"
	"github.com/warmpool/warmpool/driver/local"
	"github.com/warmpool/warmpool/internal/testing/await"
)

// agentEnv turns the test binary into the demo agent, so the driver's tests need no
// prebuilt warmpool binary: the driver runs os.Args[0] with this variable set.
const agentEnv = "WARMPOOL_TEST_DEMO_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) == "1" {
		os.Exit(runAgent())
	}
	goleak.VerifyTestMain(m)
}

// runAgent is the child side: everything after the "demo-agent" word goes to Main, and
// SIGTERM stops it gracefully, as in the real binary.
func runAgent() int {
	args := os.Args[1:]
	if i := slices.Index(args, "demo-agent"); i >= 0 {
		args = args[i+1:]
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := demoagent.Main(ctx, args, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "demo-agent:", err)
		return 1
	}
	return 0
}

// mustLocal returns a driver on dir that runs this test binary as the agent, closed at
// cleanup.
func mustLocal(t *testing.T, dir string) *local.Driver {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the local driver's tests use /proc")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.New(local.Config{
		Binary: exe,
		// A race-instrumented binary sleeps 1s at exit by default; agents need not.
		Env:       []string{agentEnv + "=1", "GORACE=atexit_sleep_ms=0"},
		StateDir:  dir,
		Logger:    slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
		StopGrace: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// TestConformance runs the PodDriver contract: a pod dies by SIGKILL, arguments the
// agent refuses fail its deploys, a start delay stalls them.
func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T, mode drivertest.Mode) *drivertest.Harness {
		l := mustLocal(t, t.TempDir())
		h := &drivertest.Harness{
			Driver:     l,
			ServesHTTP: true,
			Settle:     30 * time.Second,
			Kill: func(t *testing.T, pod warmpool.Pod) {
				if err := syscall.Kill(mustState(t, l, pod.ID).PID, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			},
			Labels: func(t *testing.T, pod warmpool.Pod) map[string]string { return mustState(t, l, pod.ID).Labels },
			Leftovers: func(t *testing.T, podID string) []string {
				var left []string
				for _, pid := range agentPIDs(t, podID) {
					left = append(left, fmt.Sprintf("agent process %d", pid))
				}
				return left
			},
		}
		switch mode {
		case drivertest.Failing:
			h.Spec = func(s *warmpool.DeploySpec) { s.Args = []string{"--no-such-flag"} }
			h.FailReason = "no-such-flag"
		case drivertest.Stalled:
			h.Spec = func(s *warmpool.DeploySpec) { s.Args = []string{"--start-delay", "1h"} }
		}
		return h
	})
}

// localReq asks for a pod of scope; the generous ready timeout absorbs a loaded
// machine starting a race-instrumented test binary.
func localReq(t *testing.T, scope string, fence int64, readyTimeoutS int, args ...string) warmpool.DeployRequest {
	t.Helper()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Deploy.ReadyTimeoutS = readyTimeoutS
	cfg.Deploy.Args = args
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	return warmpool.DeployRequest{ScopeID: scope, DeployVer: "dv1", Fence: fence, Spec: cfg.Deploy}
}

// stateFile is the part of a pod's state file the tests look at.
type stateFile struct {
	Pod    warmpool.Pod      `json:"pod"`
	PID    int               `json:"pid"`
	Ready  bool              `json:"ready"`
	Labels map[string]string `json:"labels"`
}

func mustState(t *testing.T, l *local.Driver, podID string) stateFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(l.StateDir(), podID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var s stateFile
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// agentPIDs lists the processes running the demo agent of pod name.
func agentPIDs(t *testing.T, name string) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		args := strings.Split(string(b), "\x00")
		if slices.Contains(args, "demo-agent") && slices.Contains(args, name) {
			var pid int
			if _, err := fmt.Sscanf(f, "/proc/%d/cmdline", &pid); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			pids = append(pids, pid)
		}
	}
	return pids
}

// gone reports whether pid no longer exists (our children are reaped by the driver,
// so an exited one is not even a zombie).
func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// runningNotZombie reports whether pid is a live process, not a zombie.
func runningNotZombie(t *testing.T, pid int) bool {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state letter follows the command name, which is in parentheses.
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(rest, "Z")
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustList(t *testing.T, d warmpool.PodDriver) []warmpool.Pod {
	t.Helper()
	pods, err := d.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func ids(pods []warmpool.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.ID)
	}
	return out
}

func TestLocalExitBeforeReady(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	// The start delay keeps it unready, so the death always comes first.
	_, err := l.Deploy(testCtx(t), localReq(t, "crashy", 2, 60, "--start-delay", "1h", "--die-after", "50ms"))
	drivertest.WantError(t, err, warmpool.CodeDeployFailed, "exited before it became ready")
	// The agent's own last words are part of the message.
	if !strings.Contains(err.Error(), "dying after") {
		t.Fatalf("err = %q, want the agent's stderr in it", err)
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List = %+v, want nothing left", pods)
	}
}

// A scope whose env has WARMPOOL_DEMO_FAIL=start is a crashing image: its deploys fail
// at once with the agent's words, not after ready_timeout_s.
func TestLocalDemoFailStart(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	req := localReq(t, "crashing", 2, 60)
	req.Spec.Env = map[string]string{demoagent.FailEnv: demoagent.FailStart}
	begin := time.Now()
	_, err := l.Deploy(testCtx(t), req)
	drivertest.WantError(t, err, warmpool.CodeDeployFailed, "exited before it became ready (process exited: exit status 1)")
	if !strings.Contains(err.Error(), "exiting at start") {
		t.Fatalf("err = %q, want the agent's stderr in it", err)
	}
	if took := time.Since(begin); took > 30*time.Second {
		t.Fatalf("the deploy failed after %v, want at once", took)
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List = %+v, want nothing left", pods)
	}
}

func TestLocalSharedStateDir(t *testing.T) {
	dir := t.TempDir()
	a, b := mustLocal(t, dir), mustLocal(t, dir)
	ctx := testCtx(t)

	podA, err := a.Deploy(ctx, localReq(t, "shared", 1, 60))
	if err != nil {
		t.Fatal(err)
	}
	podB, err := b.Deploy(ctx, localReq(t, "shared", 2, 60))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*local.Driver{a, b} {
		pods := mustList(t, d)
		if !slices.Equal(ids(pods), []string{podA.ID, podB.ID}) || !pods[0].Ready || !pods[1].Ready {
			t.Fatalf("List = %+v, want both pods ready", pods)
		}
	}
	// The name is taken across processes: the fence makes a repeated create fail.
	_, err = b.Deploy(ctx, localReq(t, "shared", 1, 60))
	drivertest.WantError(t, err, warmpool.CodeDeployFailed, "already exists")

	// b deletes a's pod by PID; a sees it gone.
	pidA := mustState(t, a, podA.ID).PID
	if err := b.Delete(ctx, podA); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "a's pod process to be reaped", func() bool { return gone(pidA) })
	if got := ids(mustList(t, a)); !slices.Equal(got, []string{podB.ID}) {
		t.Fatalf("a lists %v after b deleted its pod, want only %s", got, podB.ID)
	}

	// Closing a leaves b's pod alone.
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	pods := mustList(t, b)
	if len(pods) != 1 || pods[0].ID != podB.ID || !pods[0].Ready || pods[0].Dead != "" {
		t.Fatalf("b lists %+v after a closed", pods)
	}
	if err := b.Probe(ctx, podB); err != nil {
		t.Fatalf("b's pod after a closed: %v", err)
	}
}

func TestLocalCloseStopsEverything(t *testing.T) {
	dir := t.TempDir()
	l := mustLocal(t, dir)
	ctx := testCtx(t)
	var pids []int
	for fence := int64(1); fence <= 2; fence++ {
		pod, err := l.Deploy(ctx, localReq(t, "close", fence, 60))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, mustState(t, l, pod.ID).PID)
	}
	// And one still starting when Close comes.
	startReq := localReq(t, "close", 3, 600, "--start-delay", "1h")
	starting := make(chan error, 1)
	go func() {
		_, err := l.Deploy(ctx, startReq)
		starting <- err
	}()
	await.True(t, 30*time.Second, "the third pod to be registered", func() bool { return len(mustList(t, l)) == 3 })

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	drivertest.WantError(t, <-starting, warmpool.CodeDeployFailed, "closed")
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d survived Close", pid)
		}
	}
	if pids := agentPIDs(t, warmpool.PodName("close", 3)); len(pids) != 0 {
		t.Errorf("starting pod survived Close: %v", pids)
	}
	// The stopped pods' files stay, marked, for the other servers sharing the
	// directory: they list them dead, and their Delete removes the files.
	other := mustLocal(t, dir)
	left := mustList(t, other)
	if !slices.Equal(ids(left), []string{warmpool.PodName("close", 1), warmpool.PodName("close", 2)}) ||
		left[0].Dead != "stopped with its server process" || left[1].Dead != left[0].Dead || left[0].Ready {
		t.Fatalf("another driver lists %+v after Close, want the two pods it stopped, dead", left)
	}
	for _, p := range left {
		if err := other.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("state files left after the other driver deleted the stopped pods: %v", files)
	}
	_, err := l.Deploy(ctx, localReq(t, "close", 4, 60))
	drivertest.WantError(t, err, warmpool.CodeDeployFailed, "closed")
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestLocalTempStateDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the local driver's tests use /proc")
	}
	l, err := local.New(local.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := l.StateDir()
	if _, err := os.Stat(dir); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temporary state dir %s left after Close (%v)", dir, err)
	}
}

// TestLocalPIDReuseGuard records a pod whose PID now belongs to an unrelated process:
// List must call it dead, and Delete must drop the record without signalling that
// process.
func TestLocalPIDReuseGuard(t *testing.T) {
	dir := t.TempDir()
	l := mustLocal(t, dir)
	sleeper := exec.Command("sleep", "300")
	sleeper.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group leader, like a pod
	if err := sleeper.Start(); err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
	})
	name := warmpool.PodName("reuse", 1)
	rec := map[string]any{
		"pod": warmpool.Pod{ID: name, ScopeID: "reuse", DeployVer: "dv1", Fence: 1,
			SSEURL: "http://127.0.0.1:1/sse", HealthURL: "http://127.0.0.1:1/health", CreatedAt: 1},
		"pid":   sleeper.Process.Pid,
		"ready": true,
		"labels": map[string]string{
			warmpool.LabelManagedBy: warmpool.ManagedByValue, warmpool.LabelScope: "reuse",
			warmpool.LabelDeployVer: "dv1", warmpool.LabelFence: "1",
		},
	}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	pods := mustList(t, l)
	if len(pods) != 1 || pods[0].Ready || !strings.Contains(pods[0].Dead, "something else") {
		t.Fatalf("List = %+v, want the pod dead because its pid runs something else", pods)
	}
	if err := l.Delete(testCtx(t), pods[0]); err != nil {
		t.Fatal(err)
	}
	// Had Delete signalled it, the sleeper would now be a zombie awaiting our Wait.
	if !runningNotZombie(t, sleeper.Process.Pid) {
		t.Fatal("Delete signalled the unrelated process")
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List after Delete = %+v", pods)
	}
}

// A driver with event functions reports what another server process sharing its state
// directory does to its pods: b's pod as it appears ready, and as gone when b deletes
// it, so a sweeper that keeps its view from the events sees every pod List shows.
func TestLocalEventsOfAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	a, b := mustLocal(t, dir), mustLocal(t, dir)
	ctx := testCtx(t)
	var mu sync.Mutex
	var seen []warmpool.PodEvent
	a.OnPodEvent(func(ev warmpool.PodEvent) { mu.Lock(); seen = append(seen, ev); mu.Unlock() })
	has := func(match func(warmpool.PodEvent) bool) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(seen, match)
	}
	pod, err := b.Deploy(ctx, localReq(t, "other", 1, 60))
	if err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "a's event of b's pod, ready", func() bool {
		return has(func(ev warmpool.PodEvent) bool { return ev.Pod.ID == pod.ID && ev.Pod.Ready && !ev.Gone })
	})
	if err := b.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "a's event of b's pod, gone", func() bool {
		return has(func(ev warmpool.PodEvent) bool { return ev.Pod.ID == pod.ID && ev.Gone && ev.Pod.Dead != "" })
	})
}

// A pod another server process started and stopped (its Close) between two looks of
// the watch is still reported, dead: a's watch is held in its event function by its
// first event (of b's first pod) while b deploys a second pod and closes, so a never
// sees the second alive; its next look must tell of it all the same (with the files
// removed, a would never hear of it, and a sweeper following a's events would keep it
// in Redis as a ghost).
func TestLocalEventsOfAPodStoppedBetweenLooks(t *testing.T) {
	dir := t.TempDir()
	a, b := mustLocal(t, dir), mustLocal(t, dir)
	ctx := testCtx(t)
	var mu sync.Mutex
	var seen []warmpool.PodEvent
	held, release := make(chan struct{}), make(chan struct{})
	a.OnPodEvent(func(ev warmpool.PodEvent) {
		mu.Lock()
		seen = append(seen, ev)
		n := len(seen)
		mu.Unlock()
		if n == 1 {
			close(held)
			<-release
		}
	})
	if _, err := b.Deploy(ctx, localReq(t, "between", 1, 60)); err != nil {
		t.Fatal(err)
	}
	<-held
	second, err := b.Deploy(ctx, localReq(t, "between", 2, 60))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	await.True(t, 30*time.Second, "a's event of b's second pod, dead", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(seen, func(ev warmpool.PodEvent) bool { return ev.Pod.ID == second.ID && ev.Pod.Dead != "" })
	})
}
