package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/manifests"
	"github.com/warmpool/warmpool/internal/testing/testpg"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// imageEntrypoint is the ENTRYPOINT of the image (Dockerfile; scripts/image-test.sh
// checks the built image has it): a container without a command runs it.
const imageEntrypoint = "/warmpool"

// TestDeploymentProcesses runs the Deployment that deploy/overlays/example renders as
// its replicas, `warmpool serve` processes with exactly the container's command, args
// and environment, resolved as the kubelet resolves them (the ConfigMap through
// envFrom, the Secret's keys, the pod's name and namespace), and probes each on the
// manifest's probe paths. What differs from a cluster, and only that:
//   - the Secret holds the loopback Redis and PostgreSQL of the test (REDIS_ADDR and
//     WARMPOOL_TEST_POSTGRES, which make test sets) and a test token;
//   - WARMPOOL_LISTEN's 0.0.0.0:8080 becomes 127.0.0.1:<free port>: pods have a
//     network namespace each, these processes share one;
//   - WARMPOOL_DRIVER kubernetes becomes fake: there is no cluster here (make e2e-k8s
//     runs the kubernetes driver on a real kube-apiserver).
func TestDeploymentProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary; skipped with -short")
	}
	if os.Getenv("REDIS_ADDR") == "" {
		t.Skip("REDIS_ADDR is not set: run under scripts/with-redis.sh (make test does)")
	}
	storeDSN := testpg.DSN(t)
	bin := warmpoolBin(t)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := manifests.Render(ctx, "../deploy/overlays/example")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	configMaps := map[string]*corev1.ConfigMap{}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *appsv1.Deployment:
			dep = o
		case *corev1.ConfigMap:
			configMaps[o.Name] = o
		}
	}
	if dep == nil || len(dep.Spec.Template.Spec.Containers) != 1 || dep.Spec.Replicas == nil {
		t.Fatalf("no Deployment with one container and a replica count in the render:\n%s", out)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	command := c.Command
	if len(command) == 0 {
		command = []string{imageEntrypoint}
	}
	if command[0] != imageEntrypoint {
		t.Fatalf("container command %q: the image holds only %s", command, imageEntrypoint)
	}
	token, adminToken := randomHex(t), randomHex(t)
	secret := map[string]string{
		"redis-url":   redisURL(t, c, configMaps),
		"store-dsn":   storeDSN,
		"auth-token":  token,
		"admin-token": adminToken,
		// The README's Secret: every key it tells operators to create.
		"report-secret": randomHex(t),
	}

	type replica struct {
		name, base string
		proc       *proc
		ready      time.Duration
	}
	var replicas []*replica
	start := time.Now()
	for i := range int(*dep.Spec.Replicas) {
		name := fmt.Sprintf("%s-%d-%s", dep.Name, i, randomHex(t)[:5])
		env := podEnv(t, c, configMaps, secret, name, dep.Namespace)
		if i == 0 {
			knownSettings(t, bin, env)
		}
		addr := freeAddr(t)
		env = swap(t, env, "WARMPOOL_LISTEN", "0.0.0.0:8080", addr)
		env = swap(t, env, "WARMPOOL_DRIVER", "kubernetes", "fake")
		args := append(slices.Clone(command[1:]), c.Args...)
		replicas = append(replicas, &replica{name: name, base: "http://" + addr, proc: startProc(t, bin, env, args...)})
	}

	// Each answers both probes, as the kubelet asks them.
	for _, r := range replicas {
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Fatalf("container has no HTTP probe: %+v", p)
			}
			r.proc.waitOK(t, r.base+p.HTTPGet.Path, 60*time.Second)
		}
		r.ready = time.Since(start)
		t.Logf("%s: readiness %s and liveness %s answer 200, %v after the start of all %d",
			r.name, c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path, r.ready.Round(time.Millisecond), len(replicas))
	}

	// One service: a config written through one replica is read and routed through
	// the others, and the Secret's tokens guard the API: the gateway token routes, only
	// the admin token writes and reads configs.
	scope := "deploy-" + randomHex(t)[:8]
	auth := "Bearer " + token
	if status, _ := request(t, http.MethodGet, replicas[0].base+"/v1/scopes", "", ""); status != http.StatusUnauthorized {
		t.Errorf("GET /v1/scopes without the token: %d, want 401", status)
	}
	doc := `{"pool":{"max_concurrency":2,"pod_concurrency":1}}`
	if status, raw := request(t, http.MethodPut, replicas[0].base+"/v1/scopes/"+scope+"/config", auth, doc); status != http.StatusForbidden {
		t.Errorf("PUT config with the gateway token: %d %s, want 403", status, raw)
	}
	var put struct{ Version int64 }
	if status, raw := request(t, http.MethodPut, replicas[0].base+"/v1/scopes/"+scope+"/config", "Bearer "+adminToken, doc); status != http.StatusOK || json.Unmarshal(raw, &put) != nil || put.Version != 1 {
		t.Fatalf("PUT config through %s: %d %s", replicas[0].name, status, raw)
	}
	last := replicas[len(replicas)-1]
	if status, raw := request(t, http.MethodGet, last.base+"/v1/scopes/"+scope+"/config", auth, ""); status != http.StatusForbidden {
		t.Errorf("GET config with the gateway token: %d %s, want 403", status, raw)
	}
	var got struct{ Version int64 }
	if status, raw := request(t, http.MethodGet, last.base+"/v1/scopes/"+scope+"/config", "Bearer "+adminToken, ""); status != http.StatusOK || json.Unmarshal(raw, &got) != nil || got.Version != 1 {
		t.Fatalf("GET config through %s: %d %s", last.name, status, raw)
	}
	var b warmpool.Binding
	if status, raw := request(t, http.MethodPost, replicas[1%len(replicas)].base+"/v1/scopes/"+scope+"/sessions", auth, `{"session_id":"s1"}`); status != http.StatusOK || json.Unmarshal(raw, &b) != nil || b.PodID == "" {
		t.Fatalf("route through a replica: %d %s", status, raw)
	}

	// SIGTERM to all, as the kubelet stops pods: each drains (WARMPOOL_DRAIN_DELAY)
	// and exits cleanly within the pod's grace.
	grace := 30 * time.Second
	if g := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	stopped := time.Now()
	for _, r := range replicas {
		if err := r.proc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range replicas {
		select {
		case <-r.proc.done:
		case <-time.After(time.Until(stopped.Add(grace))):
			t.Fatalf("%s still runs %v after SIGTERM: the kubelet would kill it", r.name, grace)
		}
		if code := r.proc.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("%s exited %d after SIGTERM; stderr:\n%s", r.name, code, r.proc.stderr.String())
		}
		t.Logf("%s stopped %v after SIGTERM", r.name, time.Since(stopped).Round(time.Millisecond))
	}
}

// podEnv is the container's environment as the kubelet builds it: envFrom first,
// then env, a later name replacing an earlier one.
func podEnv(t *testing.T, c corev1.Container, configMaps map[string]*corev1.ConfigMap, secret map[string]string, podName, namespace string) []string {
	t.Helper()
	var names []string
	values := map[string]string{}
	set := func(k, v string) {
		if _, ok := values[k]; !ok {
			names = append(names, k)
		}
		values[k] = v
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			t.Fatalf("envFrom %+v: only ConfigMaps are resolved here", from)
		}
		cm, ok := configMaps[from.ConfigMapRef.Name]
		if !ok {
			t.Fatalf("envFrom names ConfigMap %s, which the render does not hold", from.ConfigMapRef.Name)
		}
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range cm.Data {
				if !yield(k) {
					return
				}
			}
		}) {
			set(from.Prefix+k, cm.Data[k])
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			v, ok := secret[e.ValueFrom.SecretKeyRef.Key]
			if !ok {
				t.Fatalf("%s takes key %q of the Secret, which the README does not tell operators to create", e.Name, e.ValueFrom.SecretKeyRef.Key)
			}
			set(e.Name, v)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			set(e.Name, podName)
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
			set(e.Name, namespace)
		default:
			t.Fatalf("%s: value source %+v is not resolved here", e.Name, e.ValueFrom)
		}
	}
	env := make([]string, 0, len(names))
	for _, k := range names {
		env = append(env, k+"="+values[k])
	}
	return env
}

// swap replaces the value of name, which must be want, by to.
func swap(t *testing.T, env []string, name, want, to string) []string {
	t.Helper()
	out := slices.Clone(env)
	for i, kv := range out {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			if v != want {
				t.Fatalf("the manifest sets %s=%s; this test swaps only %s", name, v, want)
			}
			out[i] = name + "=" + to
			return out
		}
	}
	t.Fatalf("the manifest does not set %s", name)
	return nil
}

// knownSettings fails the test for a WARMPOOL_* variable of env that `warmpool serve`
// does not read: a setting it would silently ignore.
func knownSettings(t *testing.T, bin string, env []string) {
	t.Helper()
	help, _ := exec.Command(bin, "serve", "-h").CombinedOutput()
	known := map[string]bool{}
	for _, m := range regexp.MustCompile(`\[(WARMPOOL_[A-Z_]+)\]`).FindAllSubmatch(help, -1) {
		known[string(m[1])] = true
	}
	if len(known) == 0 {
		t.Fatalf("`warmpool serve -h` names no WARMPOOL_* variable:\n%s", help)
	}
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "WARMPOOL_") && !known[k] {
			t.Errorf("the manifest sets %s, which `warmpool serve` does not read", k)
		}
	}
}

// get is the status of one GET of url, 0 when no answer comes within 2 seconds.
func get(url string) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// request sends one request, with an Authorization header when auth is set, and
// returns the status and body; the test fails when no answer comes.
func request(t *testing.T, method, url, auth, body string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, raw
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// redisURL is the --redis URL of the README's ACL user for the key prefix the
// rendered container is given (WARMPOOL_PREFIX from its ConfigMaps or env, wp: when
// none): a deployment with its own prefix gets a user of its own.
func redisURL(t *testing.T, c corev1.Container, configMaps map[string]*corev1.ConfigMap) string {
	prefix := "wp:"
	for _, from := range c.EnvFrom {
		key, ok := strings.CutPrefix("WARMPOOL_PREFIX", from.Prefix)
		if !ok || from.ConfigMapRef == nil || configMaps[from.ConfigMapRef.Name] == nil {
			continue
		}
		if v, ok := configMaps[from.ConfigMapRef.Name].Data[key]; ok {
			prefix = v
		}
	}
	for _, e := range c.Env {
		if e.Name == "WARMPOOL_PREFIX" && e.ValueFrom == nil {
			prefix = e.Value
		}
	}
	if prefix == "wp:" {
		testredis.EnsureACLUser(t)
		return testredis.UserURL(os.Getenv("REDIS_ADDR"))
	}
	return testredis.PrefixUserURL(t, prefix)
}
