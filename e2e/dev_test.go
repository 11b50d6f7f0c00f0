// Package e2e holds black-box tests of the built warmpool binary.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/syncbuf"
)

// TestDevServer runs `warmpool serve --dev` as a real process and drives it as a
// newcomer and an operator would: the printed curl line, a session routed to a real
// local pod, its SSE stream, the pod going idle and being reused, the operator
// sub-commands, and a clean exit on SIGTERM that takes the pods with it.
func TestDevServer(t *testing.T) {
	p, base, bin := runServe(t, "--dev", "--store", filepath.Join(t.TempDir(), "w.db"))

	// The start-up lines: where it listens, and the one curl line that routes a session.
	p.waitLine(t, 10*time.Second, "listening on "+base)
	curlLine := p.waitLine(t, 10*time.Second, "curl ")
	m := regexp.MustCompile(`^  curl -s -X POST (\S+) -d '([^']*)'$`).FindStringSubmatch(curlLine)
	if m == nil {
		t.Fatalf("curl line %q: want `  curl -s -X POST URL -d 'BODY'`", curlLine)
	}
	routeURL, routeBody := m[1], m[2]
	if routeURL != base+"/v1/scopes/demo/sessions" {
		t.Fatalf("curl line routes to %q, want %s/v1/scopes/demo/sessions", routeURL, base)
	}

	// Run exactly what the line says.
	var first warmpool.Binding
	status := call(t, http.MethodPost, routeURL, routeBody, &first)
	if status != http.StatusOK || first.ScopeID != "demo" || first.SessionID == "" || !first.New ||
		first.PodID == "" || !strings.HasPrefix(first.SSEURL, "http://127.0.0.1:") || first.DeployVer == "" {
		t.Fatalf("route from the curl line: %d %+v", status, first)
	}
	session := first.SessionID
	if _, err := exec.LookPath("curl"); err == nil {
		out, err := exec.Command("sh", "-c", strings.TrimSpace(curlLine)).Output()
		var again warmpool.Binding
		if err != nil || json.Unmarshal(out, &again) != nil || again.PodID != first.PodID || again.New {
			t.Fatalf("the curl line itself: %v, %s; want %s again with new:false", err, out, first.PodID)
		}
	}

	// The pod is a real agent: its SSE stream says hello with its name, then beats.
	readSSE(t, first.SSEURL, first.PodID)

	// End the session: the pod goes idle.
	var end struct {
		Released *bool `json:"released"`
	}
	if st := call(t, http.MethodDelete, base+"/v1/scopes/demo/sessions/"+session, "", &end); st != http.StatusOK || end.Released == nil || !*end.Released {
		t.Fatalf("end: %d %+v", st, end)
	}
	pool := getPool(t, base, "demo")
	if len(pool.Pods) != 1 || pool.Pods[0].PodID != first.PodID || pool.Pods[0].State != "idle" ||
		pool.Pods[0].Sessions != 0 || pool.Pods[0].IdleSince == nil {
		t.Fatalf("pool after the end: %+v", pool)
	}

	// Another session reuses the warm pod: no second deploy.
	var second warmpool.Binding
	if st := call(t, http.MethodPost, base+"/v1/scopes/demo/sessions", `{"session_id":"e2e-2"}`, &second); st != http.StatusOK || !second.New {
		t.Fatalf("second route: %d %+v", st, second)
	}
	if second.PodID != first.PodID || second.SSEURL != first.SSEURL {
		t.Fatalf("second session on %s, want the warm pod %s", second.PodID, first.PodID)
	}
	pool = getPool(t, base, "demo")
	if len(pool.Pods) != 1 || pool.Pods[0].State != "busy" || pool.Pods[0].Sessions != 1 {
		t.Fatalf("pool after the reuse: %+v", pool)
	}

	t.Run("operator", func(t *testing.T) { testOperator(t, bin, base, first.PodID) })

	// SIGTERM: a clean exit within a few seconds, and the local pods go with it.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("still running 10s after SIGTERM; stderr:\n%s", p.stderr.String())
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM; stderr:\n%s", code, p.stderr.String())
	}
	if strings.Contains(p.stderr.String(), "panic") {
		t.Fatalf("panic in the log:\n%s", p.stderr.String())
	}
	health := strings.TrimSuffix(first.SSEURL, "/sse") + "/health"
	await.True(t, 5*time.Second, "the pod at "+health+" stops answering", func() bool {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get(health)
		if err != nil {
			return true
		}
		resp.Body.Close()
		return false
	})
}

// testOperator runs the operator sub-commands against the server at base.
func testOperator(t *testing.T, bin, base, demoPod string) {
	dir := t.TempDir()
	good := filepath.Join(dir, "scope.json")
	writeFile(t, good, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":4,"pod_concurrency":2}}`)
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, bad, `{"pool":{"pod_concurrency":0}}`)
	unknown := filepath.Join(dir, "unknown.json")
	writeFile(t, unknown, `{"pool":{"max_concurrency":4},"replicas":3}`)

	var put struct {
		ScopeID   string `json:"scope_id"`
		Version   int64  `json:"version"`
		DeployVer string `json:"deploy_ver"`
	}
	operatorOK(t, bin, &put, "scope", "put", "e2e-ops", "-f", good, "--server", base)
	if put.ScopeID != "e2e-ops" || put.Version != 1 || len(put.DeployVer) != 16 {
		t.Fatalf("scope put: %+v", put)
	}
	// Flags before the positional arguments work too.
	operatorOK(t, bin, &put, "scope", "--server", base, "put", "e2e-ops", "-f", good)
	if put.Version != 2 {
		t.Fatalf("second scope put: %+v", put)
	}

	var got struct {
		ScopeID string `json:"scope_id"`
		Version int64  `json:"version"`
		Config  struct {
			Deploy struct {
				Resources struct{ Memory string } `json:"resources"`
			} `json:"deploy"`
			Pool struct {
				MaxConcurrency int `json:"max_concurrency"`
			} `json:"pool"`
		} `json:"config"`
	}
	operatorOK(t, bin, &got, "scope", "get", "e2e-ops", "--server", base)
	if got.ScopeID != "e2e-ops" || got.Version != 2 || got.Config.Pool.MaxConcurrency != 4 || got.Config.Deploy.Resources.Memory != "512Mi" {
		t.Fatalf("scope get: %+v", got)
	}

	var scopes struct {
		Scopes []struct {
			ScopeID  string `json:"scope_id"`
			Pods     int    `json:"pods"`
			Sessions int    `json:"sessions"`
		} `json:"scopes"`
	}
	operatorOK(t, bin, &scopes, "scopes", "--server", base)
	byID := map[string][2]int{}
	for _, s := range scopes.Scopes {
		byID[s.ScopeID] = [2]int{s.Pods, s.Sessions}
	}
	if len(byID) != 2 || byID["demo"] != [2]int{1, 1} || byID["e2e-ops"] != [2]int{0, 0} {
		t.Fatalf("scopes: %+v", scopes)
	}

	var pool poolStatus
	operatorOK(t, bin, &pool, "pool", "demo", "--server", base)
	if pool.ScopeID != "demo" || len(pool.Pods) != 1 || pool.Pods[0].PodID != demoPod {
		t.Fatalf("pool: %+v", pool)
	}

	var synced struct {
		Scopes *int `json:"scopes"`
	}
	operatorOK(t, bin, &synced, "sync", "--server", base)
	if synced.Scopes == nil || *synced.Scopes != 2 {
		t.Fatalf("sync: %+v", synced)
	}

	// Failures exit non-zero and say what the server said.
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"scope", "put", "BAD", "-f", good}, []string{"400", "VALIDATION", "scope: must match"}},
		{[]string{"scope", "put", "e2e-bad", "-f", bad}, []string{"400", "VALIDATION", "pool.pod_concurrency"}},
		{[]string{"scope", "put", "e2e-bad", "-f", unknown}, []string{"VALIDATION", "replicas: unknown field"}},
		{[]string{"scope", "get", "nosuch"}, []string{"404", "SCOPE_NOT_FOUND", `"nosuch"`}},
		{[]string{"pool", "nosuch"}, []string{"404", "SCOPE_NOT_FOUND"}},
		{[]string{"scope", "put", "e2e-bad", "-f", filepath.Join(dir, "missing.json")}, []string{"missing.json"}},
		{[]string{"scope", "put", "e2e-bad"}, []string{"-f FILE is required"}},
		{[]string{"pool"}, []string{"usage"}},
		{[]string{"scopes", "extra"}, []string{"usage"}},
	} {
		stdout, stderr, code := operator(t, bin, append(c.args, "--server", base)...)
		if code == 0 {
			t.Fatalf("%v: exit 0, stdout %q", c.args, stdout)
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Fatalf("%v: stderr %q should contain %q", c.args, stderr, w)
			}
		}
	}
	// Nothing bad was stored.
	if _, stderr, code := operator(t, bin, "scope", "get", "e2e-bad", "--server", base); code == 0 || !strings.Contains(stderr, "SCOPE_NOT_FOUND") {
		t.Fatalf("e2e-bad stored: exit %d, %s", code, stderr)
	}
	// A server that is not there.
	if _, stderr, code := operator(t, bin, "scopes", "--server", "http://"+freeAddr(t)); code == 0 || stderr == "" {
		t.Fatalf("scopes against no server: exit %d, %q", code, stderr)
	}
}

type poolStatus struct {
	ScopeID string `json:"scope_id"`
	Pods    []struct {
		PodID     string  `json:"pod_id"`
		State     string  `json:"state"`
		Sessions  int     `json:"sessions"`
		IdleSince *string `json:"idle_since"`
	} `json:"pods"`
}

func getPool(t *testing.T, base, scope string) poolStatus {
	t.Helper()
	var p poolStatus
	if st := call(t, http.MethodGet, base+"/v1/scopes/"+scope+"/pool", "", &p); st != http.StatusOK {
		t.Fatalf("pool %s: %d", scope, st)
	}
	return p
}

// call sends one request and decodes the JSON answer into out; it returns the status.
func call(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	status, raw := request(t, method, url, "", body)
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s %s: %d %s: %v", method, url, status, raw, err)
	}
	return status
}

// readSSE reads the pod's event stream until it has seen the hello event naming pod
// and one heartbeat.
func readSSE(t *testing.T, url, pod string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("SSE %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("SSE %s: %s, Content-Type %q", url, resp.Status, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var events []string
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data struct {
				Pod string `json:"pod"`
			}
			if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data); err != nil {
				t.Fatalf("SSE data %q: %v", line, err)
			}
			if data.Pod != pod {
				t.Fatalf("SSE %s event names pod %q, want %q", event, data.Pod, pod)
			}
			events = append(events, event)
			if len(events) == 1 && event != "hello" {
				t.Fatalf("first SSE event %q, want hello", event)
			}
			if event == "heartbeat" {
				return
			}
		}
	}
	t.Fatalf("SSE stream ended (%v) after events %v, before a heartbeat", sc.Err(), events)
}

// operatorOK runs an operator sub-command that must succeed and print JSON into out.
func operatorOK(t *testing.T, bin string, out any, args ...string) {
	t.Helper()
	stdout, stderr, code := operator(t, bin, args...)
	if code != 0 {
		t.Fatalf("warmpool %v: exit %d: %s", args, code, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		t.Fatalf("warmpool %v: output is not JSON: %v\n%s", args, err, stdout)
	}
}

// operator runs the binary once and returns its output and exit code.
func operator(t *testing.T, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = cleanEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("warmpool %v: %v", args, err)
	}
	if raced(e.String()) {
		t.Errorf("warmpool %v reported a data race:\n%s", args, e.String())
	}
	return o.String(), e.String(), code
}

// proc is the running server process.
type proc struct {
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{} // closed when the process has exited

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced on every stdout line
}

// runServe runs `warmpool serve --listen ADDR args...` from the binary under test and
// waits until it is ready. It returns the process, its base URL and the binary; under
// -short it skips the test.
func runServe(t *testing.T, args ...string) (p *proc, base, bin string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin = warmpoolBin(t)
	addr := freeAddr(t)
	base = "http://" + addr
	p = startServe(t, bin, append([]string{"serve", "--listen", addr}, args...)...)
	p.waitReady(t, base, 60*time.Second)
	return p, base, bin
}

// startServe starts the binary with args; the process is killed with the test, and
// its stderr is logged when the test failed.
func startServe(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	return startProc(t, bin, cleanEnv(), args...)
}

// startProc starts bin with args and exactly the environment env; the process is
// killed when the test ends.
func startProc(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	p := &proc{cmd: cmd, stderr: &syncbuf.Buffer{}, done: make(chan struct{}), more: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.more)
			p.more = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	go func() {
		<-read // Wait closes the pipe: read it to the end first
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill() // its pods die with it (Pdeathsig)
			<-p.done
		}
		if raced(p.stderr.String()) {
			t.Errorf("%s %v reported a data race (it is a -race build):\n%s", bin, args, p.stderr.String())
		} else if t.Failed() {
			t.Logf("server stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// raced tells whether a process's stderr holds a report of the race detector, which
// make test's -race build of the binary writes when it sees one.
func raced(stderr string) bool {
	return strings.Contains(stderr, "WARNING: DATA RACE")
}

// waitReady polls /readyz until it answers 200.
func (p *proc) waitReady(t *testing.T, base string, within time.Duration) {
	t.Helper()
	p.waitOK(t, base+"/readyz", within)
}

// waitOK polls url until it answers 200; the test fails when the process exits first
// or within passes.
func (p *proc) waitOK(t *testing.T, url string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for status := get(url); status != http.StatusOK; status = get(url) {
		select {
		case <-p.done:
			t.Fatalf("server exited before GET %s answered 200 (%v); stderr:\n%s", url, p.cmd.ProcessState, p.stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %d, not 200 within %s; stderr:\n%s", url, status, within, p.stderr.String())
		}
	}
}

// waitLine waits for a stdout line containing substr and returns it.
func (p *proc) waitLine(t *testing.T, within time.Duration, substr string) string {
	t.Helper()
	timeout := time.After(within)
	for {
		p.mu.Lock()
		lines, more := p.lines, p.more
		p.mu.Unlock()
		for _, l := range lines {
			if strings.Contains(l, substr) {
				return l
			}
		}
		select {
		case <-more:
		case <-p.done:
			t.Fatalf("server exited; no stdout line with %q in %q", substr, lines)
		case <-timeout:
			t.Fatalf("no stdout line with %q within %s: %q", substr, within, lines)
		}
	}
}

// The binary built for this test process, once, and removed at its end.
var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		if err := os.RemoveAll(build.dir); err != nil {
			fmt.Fprintln(os.Stderr, "remove the test build:", err)
		}
	}
	os.Exit(code)
}

// warmpoolBin is the binary under test: $WARMPOOL_BIN when it exists (make builds it),
// else one fresh build per test process.
func warmpoolBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WARMPOOL_BIN"); bin != "" {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
		t.Logf("WARMPOOL_BIN=%s does not exist; building", bin)
	}
	build.once.Do(func() {
		if build.dir, build.err = os.MkdirTemp("", "warmpool-e2e-"); build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "warmpool")
		out, err := exec.Command("go", "build", "-o", build.bin, "github.com/warmpool/warmpool/cmd/warmpool").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.bin
}

// cleanEnv is the environment without WARMPOOL_* settings, which would change what
// the commands do (an auth token, another server, another store).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WARMPOOL_") {
			env = append(env, kv)
		}
	}
	return env
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
