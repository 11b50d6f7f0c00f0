package k8s_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/demoagent"
	"github.com/warmpool/warmpool/k8s"
)

// agentEnv turns the test binary into the demo agent, so Local's tests need no
// prebuilt warmpool binary: Local runs os.Args[0] with this variable set.
const agentEnv = "WARMPOOL_TEST_DEMO_AGENT"

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) == "1" {
		os.Exit(runAgent())
	}
	os.Exit(m.Run())
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

// mustLocal returns a Local on dir that runs this test binary as the agent, closed at
// cleanup; goroutine leaks are checked after the Close.
func mustLocal(t *testing.T, dir string) *k8s.Local {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the local driver's tests use /proc")
	}
	noLeak(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l, err := k8s.NewLocal(k8s.LocalConfig{
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

// localReq asks for a pod of scope; the generous ready timeout absorbs a loaded
// machine starting a race-instrumented test binary.
func localReq(scope string, fence int64, readyTimeoutS int, args ...string) warmpool.DeployRequest {
	spec := warmpool.DefaultScopeConfig().Deploy
	spec.ReadyTimeoutS = readyTimeoutS
	spec.Args = append([]string{"--heartbeat", "50ms"}, args...)
	return warmpool.DeployRequest{ScopeID: scope, DeployVer: "dv1", Fence: fence, Spec: spec}
}

// stateFile is the part of a pod's state file the tests look at.
type stateFile struct {
	Pod    warmpool.Pod      `json:"pod"`
	PID    int               `json:"pid"`
	Ready  bool              `json:"ready"`
	Labels map[string]string `json:"labels"`
}

func mustState(t *testing.T, l *k8s.Local, podID string) stateFile {
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
			fmt.Sscanf(f, "/proc/%d/cmdline", &pid)
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

// eventually polls cond until it holds; the poll interval is not synchronisation.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// readHello opens the pod's SSE stream and returns the data of its first event.
func readHello(t *testing.T, url string) map[string]any {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET %s = %d %q", url, resp.StatusCode, ct)
	}
	br := bufio.NewReader(resp.Body)
	var event string
	var data map[string]any
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read SSE: %v", err)
		}
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatal(err)
			}
		case line == "" && event != "":
			if event != "hello" {
				t.Fatalf("first event %q, want hello", event)
			}
			return data
		}
	}
}

func TestLocalLifecycle(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	ctx := testCtx(t)

	pod, err := l.Deploy(ctx, localReq("demo", 1, 60))
	if err != nil {
		t.Fatal(err)
	}
	name := warmpool.PodName("demo", 1)
	if pod.ID != name || !pod.Ready || pod.ScopeID != "demo" || pod.DeployVer != "dv1" || pod.Fence != 1 {
		t.Fatalf("pod = %+v", pod)
	}
	if !strings.HasPrefix(pod.SSEURL, "http://127.0.0.1:") || !strings.HasSuffix(pod.SSEURL, "/sse") {
		t.Fatalf("SSEURL = %q", pod.SSEURL)
	}
	if hello := readHello(t, pod.SSEURL); hello["pod"] != name {
		t.Fatalf("hello = %v, want it to name %s", hello, name)
	}
	if err := l.Probe(ctx, pod); err != nil {
		t.Fatalf("Probe = %v", err)
	}

	st := mustState(t, l, name)
	wantLabels := map[string]string{
		warmpool.LabelManagedBy: warmpool.ManagedByValue,
		warmpool.LabelScope:     "demo",
		warmpool.LabelDeployVer: "dv1",
		warmpool.LabelFence:     "1",
	}
	for k, v := range wantLabels {
		if st.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, st.Labels[k], v)
		}
	}
	if !st.Ready || st.PID <= 1 || gone(st.PID) {
		t.Fatalf("state = %+v, want ready with a live pid", st)
	}
	pods := mustList(t, l)
	if len(pods) != 1 || pods[0].ID != name || !pods[0].Ready || pods[0].Dead != "" || pods[0].SSEURL != pod.SSEURL {
		t.Fatalf("List = %+v", pods)
	}

	if err := l.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if !gone(st.PID) {
		t.Fatalf("pid %d still exists after Delete", st.PID)
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List after Delete = %+v", pods)
	}
	if err := l.Delete(ctx, pod); err != nil {
		t.Fatalf("Delete of a missing pod = %v, want nil", err)
	}
	if err := l.Probe(ctx, pod); err == nil {
		t.Fatal("Probe of a deleted pod = nil")
	}
}

func TestLocalDiesAfterReady(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	ctx := testCtx(t)
	// Long enough to become ready first even on a loaded machine.
	pod, err := l.Deploy(ctx, localReq("crashy", 1, 60, "--die-after", "2s"))
	if err != nil {
		t.Fatal(err)
	}
	var dead warmpool.Pod
	eventually(t, "List to report the pod dead", func() bool {
		pods := mustList(t, l)
		if len(pods) == 1 && pods[0].Dead != "" {
			dead = pods[0]
			return true
		}
		return false
	})
	if dead.ID != pod.ID || dead.Ready || !strings.Contains(dead.Dead, "exit status 1") {
		t.Fatalf("dead pod = %+v, want not ready with the exit status", dead)
	}
	if err := l.Probe(ctx, pod); err == nil {
		t.Fatal("Probe of a dead pod = nil")
	}
	if err := l.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List after Delete = %+v", pods)
	}
}

func TestLocalExitBeforeReady(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	// The start delay keeps it unready, so the death always comes first.
	_, err := l.Deploy(testCtx(t), localReq("crashy", 2, 60, "--start-delay", "1h", "--die-after", "50ms"))
	wantCode(t, err, warmpool.CodeDeployFailed, "exited before it became ready")
	// The agent's own last words are part of the message.
	if !strings.Contains(err.Error(), "dying after") {
		t.Fatalf("err = %q, want the agent's stderr in it", err)
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List = %+v, want nothing left", pods)
	}
}

func TestLocalBadAgentArgs(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	_, err := l.Deploy(testCtx(t), localReq("bad", 1, 60, "--no-such-flag"))
	wantCode(t, err, warmpool.CodeDeployFailed, "no-such-flag")
}

func TestLocalStartDelayBeyondReadyTimeout(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	name := warmpool.PodName("slow", 1)
	_, err := l.Deploy(testCtx(t), localReq("slow", 1, 1, "--start-delay", "1h"))
	wantCode(t, err, warmpool.CodeDeployFailed, "not ready within 1s")
	if !strings.Contains(err.Error(), "503") {
		t.Fatalf("err = %q, want the last health answer (503) in it", err)
	}
	if pids := agentPIDs(t, name); len(pids) != 0 {
		t.Fatalf("agent processes left after the failed deploy: %v", pids)
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List = %+v, want nothing left", pods)
	}
}

func TestLocalDeployCancelled(t *testing.T) {
	l := mustLocal(t, t.TempDir())
	name := warmpool.PodName("cancel", 1)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := deployAsync(ctx, l, localReq("cancel", 1, 600, "--start-delay", "1h"))
	// The pod is registered (not ready) while its deploy runs.
	eventually(t, "the starting pod to be listed", func() bool {
		pods := mustList(t, l)
		return len(pods) == 1 && !pods[0].Ready && pods[0].Dead == ""
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Deploy = %v, want context.Canceled", err)
	}
	if pids := agentPIDs(t, name); len(pids) != 0 {
		t.Fatalf("agent processes left: %v", pids)
	}
	if pods := mustList(t, l); len(pods) != 0 {
		t.Fatalf("List = %+v", pods)
	}
}

func TestLocalSharedStateDir(t *testing.T) {
	dir := t.TempDir()
	a, b := mustLocal(t, dir), mustLocal(t, dir)
	ctx := testCtx(t)

	podA, err := a.Deploy(ctx, localReq("shared", 1, 60))
	if err != nil {
		t.Fatal(err)
	}
	podB, err := b.Deploy(ctx, localReq("shared", 2, 60))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*k8s.Local{a, b} {
		pods := mustList(t, d)
		if !slices.Equal(ids(pods), []string{podA.ID, podB.ID}) || !pods[0].Ready || !pods[1].Ready {
			t.Fatalf("List = %+v, want both pods ready", pods)
		}
	}
	// The name is taken across processes: the fence makes a repeated create fail.
	_, err = b.Deploy(ctx, localReq("shared", 1, 60))
	wantCode(t, err, warmpool.CodeDeployFailed, "already exists")

	// b deletes a's pod by PID; a sees it gone.
	pidA := mustState(t, a, podA.ID).PID
	if err := b.Delete(ctx, podA); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a's pod process to be reaped", func() bool { return gone(pidA) })
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
		pod, err := l.Deploy(ctx, localReq("close", fence, 60))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, mustState(t, l, pod.ID).PID)
	}
	// And one still starting when Close comes.
	starting := deployAsync(ctx, l, localReq("close", 3, 600, "--start-delay", "1h"))
	eventually(t, "the third pod to be registered", func() bool { return len(mustList(t, l)) == 3 })

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, <-starting, warmpool.CodeDeployFailed, "closed")
	for _, pid := range pids {
		if !gone(pid) {
			t.Errorf("pid %d survived Close", pid)
		}
	}
	if pids := agentPIDs(t, warmpool.PodName("close", 3)); len(pids) != 0 {
		t.Errorf("starting pod survived Close: %v", pids)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Errorf("state files left after Close: %v", files)
	}
	_, err := l.Deploy(ctx, localReq("close", 4, 60))
	wantCode(t, err, warmpool.CodeDeployFailed, "closed")
	if err := l.Close(); err != nil {
		t.Fatalf("second Close = %v", err)
	}
}

func TestLocalTempStateDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the local driver's tests use /proc")
	}
	noLeak(t)
	l, err := k8s.NewLocal(k8s.LocalConfig{})
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
