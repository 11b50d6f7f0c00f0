package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
)

// TestDrainOnSIGTERM runs the binary, settings from WARMPOOL_* variables, and sends it
// SIGTERM: /readyz answers 503 at once, calls are still served for the drain delay,
// then the process exits 0, each stage logged as a JSON line, and every line the
// process writes is JSON, its start-up banner included.
func TestDrainOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	const drain = 2 * time.Second
	bin := warmpoolBin(t)
	addr := freeAddr(t)
	base := "http://" + addr
	p := startProc(t, bin, append(cleanEnv(), "WARMPOOL_DEV=true", "WARMPOOL_LISTEN="+addr, "WARMPOOL_LOG_FORMAT=json",
		"WARMPOOL_DRAIN_DELAY="+drain.String(), "WARMPOOL_SHUTDOWN_GRACE=5s"),
		"serve", "--store", filepath.Join(t.TempDir(), "w.db"))
	p.waitReady(t, base, 60*time.Second)
	var b warmpool.Binding
	if st := call(t, http.MethodPost, base+"/v1/scopes/demo/sessions", `{"session_id":"s1"}`, &b); st != http.StatusOK {
		t.Fatalf("route: %d", st)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c := http.Client{Timeout: 2 * time.Second}
	await.True(t, 500*time.Millisecond, "/readyz answers 503 after SIGTERM", func() bool {
		resp, err := c.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	t.Logf("/readyz 503 %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	served := 0
	for time.Since(start) < drain*3/4 {
		var got warmpool.Binding
		if st := call(t, http.MethodGet, base+"/v1/scopes/demo/sessions/s1", "", &got); st != http.StatusOK || got.PodID != b.PodID {
			t.Fatalf("session read while draining: %d %+v", st, got)
		}
		var touched struct{ Touched bool }
		if st := call(t, http.MethodPost, base+"/v1/scopes/demo/sessions/s1/touch", "", &touched); st != http.StatusOK || !touched.Touched {
			t.Fatalf("touch while draining: %d %+v", st, touched)
		}
		served += 2
	}
	select {
	case <-p.done:
	case <-time.After(drain + 15*time.Second):
		t.Fatalf("still running %v after SIGTERM", time.Since(start))
	}
	took := time.Since(start)
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	if took < drain {
		t.Fatalf("exited %v after SIGTERM, before the drain delay %v", took, drain)
	}
	t.Logf("%d calls served while draining; exit 0 %v after SIGTERM", served, took.Round(time.Millisecond))

	// Every line is JSON, the start-up banner included, and stdout has none.
	stages := []string{"listening", "draining", "shutting down", "stopped"}
	next := 0
	for _, line := range strings.Split(strings.TrimSpace(p.stderr.String()), "\n") {
		var rec struct {
			Msg  string `json:"msg"`
			Addr string `json:"addr"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line is not JSON (--log-format json): %q", line)
		}
		if rec.Msg == "listening" && rec.Addr != base {
			t.Fatalf("listening at %q, want %q: %s", rec.Addr, base, line)
		}
		if next < len(stages) && strings.HasPrefix(rec.Msg, stages[next]) {
			next++
		}
	}
	p.mu.Lock()
	stdout := p.lines
	p.mu.Unlock()
	if len(stdout) != 0 {
		t.Fatalf("stdout with --log-format json: %q, want nothing but JSON log lines on stderr", stdout)
	}
	if next != len(stages) {
		t.Fatalf("log: stage %q missing or out of order; stderr:\n%s", stages[next], p.stderr.String())
	}
}

// TestServeNeedsRedis: the binary refuses to run an in-process Redis unless asked with
// --dev, exiting 2 with one line that says what to pass.
func TestServeNeedsRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := warmpoolBin(t)
	stdout, stderr, code := operator(t, bin, "serve", "--listen", freeAddr(t), "--store", filepath.Join(t.TempDir(), "w.db"))
	if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--redis") || !strings.Contains(stderr, "--dev") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want 2 and one line naming --redis and --dev", code, stdout, stderr)
	}
}

// TestServeNeedsDriver: with a Redis but no --driver (and no --dev) the binary does not
// start the local driver on what may be a production host: it exits 2 with one line
// naming --driver and the drivers it has, before it connects to anything (nothing
// answers at that Redis address).
func TestServeNeedsDriver(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	bin := warmpoolBin(t)
	stdout, stderr, code := operator(t, bin, "serve", "--listen", freeAddr(t), "--redis", "redis://"+freeAddr(t)+"/0",
		"--store", filepath.Join(t.TempDir(), "w.db"))
	if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--driver") ||
		!strings.Contains(stderr, "kubernetes") || !strings.Contains(stderr, "local") || !strings.Contains(stderr, "--dev") {
		t.Fatalf("exit %d, stdout %q, stderr %q: want 2 and one line naming --driver, the drivers and --dev", code, stdout, stderr)
	}
}
