//go:build e2e_k8s

package k8s_e2e

// Issue 34's target on the rig: a session config's secret reaches the agent of the
// session's pod and nothing else of the cluster. The value is read back from
// everything the API server holds that warmpool or the control plane wrote.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// TestSessionConfigSecretStaysInItsSecret: `warmpool serve` on the token of deploy/base's
// ServiceAccount (its Role: pods, and get on secrets) routes a session whose
// session_config carries an env var and a ref to a Secret of the agents' namespace
// holding a random value. The pod's agent, with the WARMPOOL_REPORT_TOKEN of its Pod
// spec, fetches the config and gets both values. Then every Pod, ConfigMap and Event
// (core/v1 and events.k8s.io) of the API server, warmpool's debug log and its
// /metrics are read back: neither value is in the pod (its annotations, its env), and
// the secret's is nowhere but in the Secret.
func TestSessionConfigSecretStaysInItsSecret(t *testing.T) {
	ns := mustNamespace(t)
	t.Cleanup(func() { deleteManagedPods(t, ns) }) // runs last
	secretValue := fmt.Sprintf("s3cr3t-%016x", rand.Uint64())
	envValue := fmt.Sprintf("env-%016x", rand.Uint64())
	ctx := context.Background()
	if _, err := admin.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Data:       map[string][]byte{"password": []byte(secretValue)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reportSecret := filepath.Join(t.TempDir(), "report-secret")
	if err := os.WriteFile(reportSecret, fmt.Appendf(nil, "%016x%016x", rand.Uint64(), rand.Uint64()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, testredis.New(t), ns, "--kubeconfig", saKubeconfig(t, ns), "--log-level", "debug",
		"--report-url", "http://warmpool.warmpool.svc:8080", "--report-secret-file", reportSecret)

	const scope, session = "e2e-sconf", "s1"
	s.putConfig(scope, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":2,"pod_concurrency":1}}`)
	body := fmt.Sprintf(`{"session_id":%q,"session_config":{"env":{"FLAVOUR":%q},"secret_refs":{"DB_PASSWORD":{"secret":"db","key":"password"}}}}`,
		session, envValue)
	var b struct {
		PodID string `json:"pod_id"`
	}
	s.must(http.MethodPost, "/v1/scopes/"+scope+"/sessions", body, &b)
	kp := mustGetPod(t, ns, b.PodID)

	token := ""
	for _, c := range kp.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == warmpool.EnvReportToken {
				token = e.Value
			}
			if e.Name == "FLAVOUR" || e.Name == "DB_PASSWORD" {
				t.Errorf("pod %s: container %s has the session config's %s in its env", kp.Name, c.Name, e.Name)
			}
		}
	}
	if token == "" {
		t.Fatalf("pod %s: no %s in its containers' env", kp.Name, warmpool.EnvReportToken)
	}
	env := agentConfig(t, s, token, session)
	if len(env) != 2 || env["FLAVOUR"] != envValue || env["DB_PASSWORD"] != secretValue {
		t.Fatalf("the agent's config of %s: %v, want FLAVOUR and DB_PASSWORD with their values", session, env)
	}

	// What the cluster holds after the fetch. The Secret itself is the control: the
	// search finds the value there (base64 in its JSON).
	sec, err := admin.CoreV1().Secrets(ns).Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !holds(t, sec, secretValue) {
		t.Fatal("the Secret's JSON does not hold its own value: the search finds nothing")
	}
	// The scheduler's event about the pod is written on its own time: the objects are
	// read back once it is among them.
	var objects map[string]any
	eventually(t, 30*time.Second, "the pod and an event about it read back", func() (bool, string) {
		var podSeen bool
		var podEvents int
		objects, podSeen, podEvents = clusterObjects(t, ns, b.PodID)
		return podSeen && podEvents > 0, fmt.Sprintf("pod %s listed: %v, events about it: %d", b.PodID, podSeen, podEvents)
	})
	for what, obj := range objects {
		if holds(t, obj, secretValue) {
			t.Errorf("%s holds the secret's value", what)
		}
	}
	if holds(t, kp, envValue) {
		t.Errorf("pod %s holds the session config's env value", kp.Name)
	}
	if strings.Contains(s.log.String(), secretValue) {
		t.Error("warmpool's log holds the secret's value")
	}
	metrics := s.must(http.MethodGet, "/metrics", "", nil)
	if !strings.Contains(string(metrics.body), "warmpool_") {
		t.Fatalf("/metrics: %.200s, no warmpool metric", metrics.body)
	}
	if strings.Contains(string(metrics.body), secretValue) {
		t.Error("/metrics holds the secret's value")
	}
	kinds := map[string]int{}
	for what := range objects {
		kinds[what[:strings.LastIndex(what, " ")]]++
	}
	t.Logf("searched for the secret's value: objects read back %v, %d bytes of debug log, %d of /metrics",
		kinds, len(s.log.String()), len(metrics.body))
	s.end(scope, session)
}

// agentConfig is GET /v1/agents/sessions/{session}/config with the pod's report
// token: the session's env.
func agentConfig(t *testing.T, s *service, token, session string) map[string]string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.base+"/v1/agents/sessions/"+session+"/config", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the agent's config of %s: %d %s (%v)", session, res.StatusCode, raw, err)
	}
	var out struct {
		Env map[string]string `json:"env"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("the agent's config of %s: %s: %v", session, raw, err)
	}
	return out.Env
}

// clusterObjects are every Pod, ConfigMap and Event (core/v1 and events.k8s.io) of
// every namespace, by kind/namespace/name; podSeen tells whether the pod pod of ns is
// among them, podEvents how many events are about it.
func clusterObjects(t *testing.T, ns, pod string) (objects map[string]any, podSeen bool, podEvents int) {
	t.Helper()
	ctx := context.Background()
	all := metav1.ListOptions{}
	objects = map[string]any{}
	pods, err := admin.CoreV1().Pods("").List(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		objects["pod "+p.Namespace+"/"+p.Name] = p
		podSeen = podSeen || p.Namespace == ns && p.Name == pod
	}
	cms, err := admin.CoreV1().ConfigMaps("").List(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cms.Items {
		objects["configmap "+c.Namespace+"/"+c.Name] = c
	}
	core, err := admin.CoreV1().Events("").List(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range core.Items {
		objects["event (core/v1) "+e.Namespace+"/"+e.Name] = e
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Namespace == ns && e.InvolvedObject.Name == pod {
			podEvents++
		}
	}
	ev, err := admin.EventsV1().Events("").List(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ev.Items {
		objects["event (events.k8s.io) "+e.Namespace+"/"+e.Name] = e
		if e.Regarding.Kind == "Pod" && e.Regarding.Namespace == ns && e.Regarding.Name == pod {
			podEvents++
		}
	}
	return objects, podSeen, podEvents
}

// holds reports whether obj's JSON holds value, as it is or base64-encoded (a
// Secret's or a ConfigMap's binaryData).
func holds(t *testing.T, obj any, value string) bool {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(raw), value) || strings.Contains(string(raw), base64.StdEncoding.EncodeToString([]byte(value)))
}
