package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A deploy in a namespace whose informer has synced costs the API server one request,
// the create: no watch and no read of its own pod (issue 22: each deploy opened a watch
// and read its pod).
func TestKubernetesDeployRequests(t *testing.T) {
	cs := readyClient(t, "127.1.0.5")
	k := mustKube(t, cs, func(c *Config) { c.DisableNodeWatch = true })
	ctx := context.Background()
	if err := k.WatchNamespace(ctx, "wp"); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	const n = 20
	deployAll(t, ctx, k, "req", n)
	verbs := map[string]int{}
	for _, a := range cs.Actions() {
		if a.GetNamespace() == "wp" && a.GetVerb() != "update" { // the test's kubelet updates
			verbs[a.GetVerb()+" "+a.GetResource().Resource]++
		}
	}
	if verbs["create pods"] != n || len(verbs) != 1 {
		t.Errorf("%d deploys made the requests %v, want %d pod creates and nothing else", n, verbs, n)
	}
}

// A 429 that names a delay (priority and fairness's rejection) is retried no sooner
// than that delay, however short the driver's own backoff.
func TestKubernetesCallWaitsRetryAfter(t *testing.T) {
	cs := newFakeClient()
	var calls atomic.Int32
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) == 1 {
			return true, nil, apierrors.NewTooManyRequests("Too many requests, please try again later.", 1)
		}
		return true, a.(k8stesting.CreateAction).GetObject(), nil
	})
	k := mustKube(t, cs, func(c *Config) { c.RetryBackoff = time.Millisecond })
	start := time.Now()
	if _, err := k.DryRun(context.Background(), "s", kubeReq("s", 1).Spec); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); calls.Load() != 2 || took < time.Second {
		t.Errorf("%d creates in %s: want the 429 retried once, after its Retry-After of 1 s", calls.Load(), took)
	}
}

// The client NewClient builds has no client-side rate limit by default, and client-go
// retries a create the API server refused with 429 and a Retry-After (what priority and
// fairness answers) after that delay, before the driver sees an error.
func TestClientRetriesTooManyRequests(t *testing.T) {
	var posts []time.Time
	var mu sync.Mutex
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/wp/pods" {
			http.NotFound(w, r)
			return
		}
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		posts = append(posts, time.Now())
		first := len(posts) == 1
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if first {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("X-Kubernetes-PF-FlowSchema-UID", "workload-low")
			w.WriteHeader(http.StatusTooManyRequests)
			_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
				Status: metav1.StatusFailure, Reason: metav1.StatusReasonTooManyRequests, Code: http.StatusTooManyRequests,
				Message: "Too many requests, please try again later.", Details: &metav1.StatusDetails{RetryAfterSeconds: 1}})
			return
		}
		w.Header().Set("Content-Type", r.Header.Get("Content-Type")) // the pod as sent: JSON or protobuf
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	t.Cleanup(api.Close)
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	doc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u, namespace: wp}}]\ncurrent-context: x\n", api.URL)
	if err := os.WriteFile(kc, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := RESTConfig(ClientOptions{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS >= 0 || cfg.RateLimiter != nil {
		t.Errorf("default client QPS %v, limiter %v: want no client-side limit", cfg.QPS, cfg.RateLimiter)
	}
	client, _, err := NewClient(ClientOptions{Kubeconfig: kc})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "wp"}}
	if _, err := client.Pods("wp").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after one 429: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(posts) != 2 || posts[1].Sub(posts[0]) < time.Second {
		t.Errorf("creates at %v: want two, the second at least the Retry-After of 1 s after the first", posts)
	}
}

// The first deploy of a namespace, whose informer has not listed it yet, reads its pod
// once: a pod deleted before that list would never reach the informer.
func TestKubernetesDeployBeforeSync(t *testing.T) {
	cs := newFakeClient()
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("not yet") // the informer never lists
	})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, a.(k8stesting.CreateAction).GetObject(), nil // answered, then gone at once
	})
	k := mustKube(t, cs, func(c *Config) { c.DisableNodeWatch = true; c.CreateSettle = time.Millisecond })
	_, err := k.Deploy(context.Background(), kubeReq("unsynced", 1))
	if err == nil || !strings.Contains(err.Error(), "deleted while starting") {
		t.Fatalf("err %v, want the deploy to find its pod deleted", err)
	}
	gets := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" {
			gets++
		}
	}
	if gets < 1 {
		t.Errorf("%d gets: the unsynced deploy did not read its pod", gets)
	}
}

// At most MaxInFlight API calls are in flight at once; the others wait for a turn and
// then run (issue 22: a burst of 1,000 creates opened about 50 connections to the API
// server beyond one HTTP/2 connection's streams).
func TestKubernetesMaxInFlight(t *testing.T) {
	k := mustKube(t, newFakeClient(), func(c *Config) { c.MaxInFlight = 3 })
	const calls = 9
	var inflight, most atomic.Int32
	entered := make(chan struct{}, calls)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range calls {
		wg.Go(func() {
			err := k.call(context.Background(), func(context.Context) error {
				n := inflight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				entered <- struct{}{}
				<-release
				inflight.Add(-1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	for range 3 {
		<-entered
	}
	close(release)
	wg.Wait()
	if most.Load() != 3 || len(entered) != calls-3 {
		t.Errorf("at most %d calls in flight, %d ran after the first 3: want 3 and %d", most.Load(), len(entered), calls-3)
	}
}
