package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// The E2B front door (SPEC §12.3) driven by the real E2B SDK from npm, at the version
// of e2e/e2b/package-lock.json, against the built binary: `serve --driver local`
// (every sandbox a session on a real demo agent process) on a redis-server of the
// test's own, both tokens on, the SDK's key the gateway token. e2e/e2b/sdk.cjs does
// what an E2B user's code does (create, getInfo, isRunning, list page by page,
// setTimeout, connect, kill, and the refusals) and prints each step's outcome.

const (
	sdkTemplate = "sdk"
	// sdkNode is the oldest node the SDK runs on (its package's engines).
	sdkNode = "20.18.1"
)

// sdkStep is one line sdk.cjs printed.
type sdkStep struct {
	Step       string            `json:"step"`
	SandboxID  string            `json:"sandboxId"`
	TemplateID string            `json:"templateId"`
	State      string            `json:"state"`
	Metadata   map[string]string `json:"metadata"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	CPUCount   int               `json:"cpuCount"`
	MemoryMB   int               `json:"memoryMB"`
	Envd       string            `json:"envdVersion"`
	Running    *bool             `json:"running"`
	Killed     *bool             `json:"killed"`
	Pages      [][]string        `json:"pages"`
	Error      string            `json:"error"`
	Message    string            `json:"message"`
	StatusCode int               `json:"statusCode"`
}

// needNode skips the test (fails it in CI) unless node and npm are there, node new
// enough for the SDK.
func needNode(t *testing.T) {
	t.Helper()
	missing := func(why string) {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: the E2B SDK test needs node >= %s and npm (Debian: apt-get install nodejs npm)", why, sdkNode)
		}
		t.Skipf("%s: the E2B SDK test needs node >= %s and npm", why, sdkNode)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		missing("no npm")
	}
	out, err := exec.Command("node", "--version").Output()
	if err != nil {
		missing("no node")
	}
	if v := strings.TrimPrefix(strings.TrimSpace(string(out)), "v"); !versionAtLeast(v, sdkNode) {
		missing("node " + v)
	}
}

// versionAtLeast compares dotted versions numerically.
func versionAtLeast(v, least string) bool {
	a, b := strings.Split(v, "."), strings.Split(least, ".")
	for i := range b {
		x, y := 0, 0
		if i < len(a) {
			x, _ = strconv.Atoi(a[i])
		}
		y, _ = strconv.Atoi(b[i])
		if x != y {
			return x > y
		}
	}
	return true
}

func TestE2BSDK(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binary, its pods and the E2B SDK; skipped with -short")
	}
	needNode(t)
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// Installed first (the first time it fetches the SDK), not within the steps' time.
	if out, err := exec.Command(filepath.Join(root, "scripts", "e2b-sdk.sh"), "--install").CombinedOutput(); err != nil {
		t.Fatalf("installing the E2B SDK: %v\n%s", err, out)
	}
	bin := warmpoolBin(t)
	dir := t.TempDir()
	srv := testredis.StartServer(t)
	addr, door := freeAddr(t), freeAddr(t)
	base := "http://" + addr
	p := startServe(t, bin, "serve", "--listen", addr, "--e2b-listen", door, "--redis", srv.URL(), "--driver", "local",
		"--local-state-dir", filepath.Join(dir, "pods"), "--store", filepath.Join(dir, "w.db"), "--log-format", "json",
		"--auth-token", gatewayToken, "--admin-token", adminToken)
	p.waitReady(t, base, 60*time.Second)
	if st, raw := request(t, http.MethodPut, base+"/v1/scopes/"+sdkTemplate+"/config", "Bearer "+adminToken,
		`{"pool":{"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":600}}`); st != http.StatusOK {
		t.Fatalf("put the template's scope: %d %s", st, raw)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "scripts", "e2b-sdk.sh"), filepath.Join(root, "e2e", "e2b", "sdk.cjs"), sdkTemplate, "nope")
	cmd.Env = append(cleanEnv(), "E2B_API_URL=http://"+door, "E2B_SANDBOX_URL=http://"+door, "E2B_API_KEY="+gatewayToken,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	start := time.Now()
	out, err := cmd.Output()
	steps := map[string][]sdkStep{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var s sdkStep
		if jerr := json.Unmarshal([]byte(line), &s); jerr != nil {
			t.Fatalf("sdk.cjs printed %q: %v\nall of it:\n%s", line, jerr, out)
		}
		steps[s.Step] = append(steps[s.Step], s)
	}
	if err != nil || len(steps["done"]) != 1 {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("sdk.cjs: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	one := func(name string) sdkStep {
		t.Helper()
		if len(steps[name]) != 1 {
			t.Fatalf("step %s: %+v, want one", name, steps[name])
		}
		return steps[name][0]
	}

	created := steps["create"]
	ids := regexp.MustCompile(`^[a-z0-9]{20}$`)
	if len(created) != 2 || !ids.MatchString(created[0].SandboxID) || !ids.MatchString(created[1].SandboxID) {
		t.Fatalf("creates: %+v", created)
	}
	ann, bob := created[0].SandboxID, created[1].SandboxID
	info := one("getInfo")
	if info.SandboxID != ann || info.TemplateID != sdkTemplate || info.State != "running" || info.Metadata["user"] != "ann" ||
		info.Metadata["run"] != "e2e" || info.EndAt.Sub(info.StartedAt) != time.Minute || info.CPUCount != 1 || info.MemoryMB != 512 ||
		info.Envd != "0.1.0" || info.StartedAt.Before(start.Add(-time.Second)) || info.StartedAt.After(time.Now()) {
		t.Fatalf("getInfo: %+v", info)
	}
	if r := one("isRunning").Running; r == nil || !*r {
		t.Fatalf("isRunning: %+v", one("isRunning"))
	}
	if pages := one("list").Pages; len(pages) != 2 || len(pages[0]) != 1 || len(pages[1]) != 1 ||
		!slices.Equal(slices.Sorted(slices.Values(append(pages[0], pages[1]...))), slices.Sorted(slices.Values([]string{ann, bob}))) {
		t.Fatalf("list in pages of one: %v, want %s and %s a page each", pages, ann, bob)
	}
	if pages := one("listAnn").Pages; len(pages) != 1 || !slices.Equal(pages[0], []string{ann}) {
		t.Fatalf("list of user=ann: %v", pages)
	}
	short := one("setTimeout").EndAt
	if short.After(time.Now().Add(5*time.Second)) || !short.After(info.StartedAt) || !short.Before(info.EndAt) {
		t.Fatalf("setTimeout(5 s): end %v (the sandbox started %v, was to end %v)", short, info.StartedAt, info.EndAt)
	}
	if c := one("connect"); c.SandboxID != ann || c.EndAt.Sub(short) < 100*time.Second {
		t.Fatalf("connect(120 s): %+v, want the end moved about 2 minutes on from %v", c, short)
	}
	if k := steps["kill"]; len(k) != 2 || k[0].Killed == nil || !*k[0].Killed || k[1].Killed == nil || !*k[1].Killed {
		t.Fatalf("kills: %+v", k)
	}
	if k := one("killAgain").Killed; k == nil || *k {
		t.Fatalf("kill of a killed sandbox: %+v, want false", one("killAgain"))
	}
	if r := one("isRunningAfterKill").Running; r == nil || *r {
		t.Fatalf("isRunning after the kill: %+v", one("isRunningAfterKill"))
	}
	for _, name := range []string{"getInfoAfterKill", "connectAfterKill"} {
		if s := one(name); s.Error != "SandboxNotFoundError" {
			t.Fatalf("%s: %+v, want SandboxNotFoundError", name, s)
		}
	}
	if pages := one("listAfterKill").Pages; len(pages) != 1 || !slices.Equal(pages[0], []string{bob}) {
		t.Fatalf("list after the kill: %v, want [[%s]]", pages, bob)
	}
	for name, want := range map[string]struct {
		class  string
		status int
		says   string
	}{
		"unknownTemplate": {"SandboxError", 404, `template "nope" not found`},
		"wrongKey":        {"AuthenticationError", 0, "X-API-Key"},
		"envs":            {"SandboxError", 400, "envVars"},
		"pause":           {"SandboxError", 501, "pause"},
	} {
		if s := one(name); s.Error != want.class || s.StatusCode != want.status || !strings.Contains(s.Message, want.says) {
			t.Errorf("%s: %+v, want %s (%d) saying %q", name, s, want.class, want.status, want.says)
		}
	}

	// Every sandbox killed: no session is left on the template's pod.
	st, raw := request(t, http.MethodGet, base+"/v1/scopes/"+sdkTemplate+"/pool", "Bearer "+gatewayToken, "")
	var pool poolStatus
	if err := json.Unmarshal(raw, &pool); st != http.StatusOK || err != nil || len(pool.Pods) == 0 {
		t.Fatalf("pool: %d %s %v", st, raw, err)
	}
	for _, pod := range pool.Pods {
		if pod.Sessions != 0 {
			t.Fatalf("pod %s has %d sessions after every sandbox was killed", pod.PodID, pod.Sessions)
		}
	}
}
