package k8s

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/podpolicy"
)

var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// mustKube returns a driver on cs with fast test timings, closed at cleanup.
func mustKube(t *testing.T, cs *fakeClient, mutate func(*Config)) *Kubernetes {
	t.Helper()
	cfg := Config{
		Namespace:          "wp",
		RetryBackoff:       time.Millisecond,
		UnschedulableGrace: 50 * time.Millisecond,
		APITimeout:         2 * time.Second,
		CacheSyncTimeout:   5 * time.Second,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	k := NewKubernetes(cs.CoreV1(), cfg)
	t.Cleanup(func() { _ = k.Close() })
	return k
}

func kubeReq(scope string, fence int64) warmpool.DeployRequest {
	spec := warmpool.DefaultScopeConfig().Deploy
	spec.ReadyTimeoutS = 30
	spec.Env = map[string]string{"ZED": "z", "ALPHA": "a"}
	spec.Command = []string{"/agent"}
	spec.Args = []string{"--listen", ":8080"}
	return warmpool.DeployRequest{ScopeID: scope, DeployVer: spec.DeployVer(), Fence: fence, Spec: spec}
}

// deployAll deploys n scopes (prefix0, prefix1, …) at once on k and fails the test
// unless every deploy succeeds.
func deployAll(t *testing.T, ctx context.Context, k *Kubernetes, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := k.Deploy(ctx, kubeReq(fmt.Sprintf("%s%d", prefix, i), 1))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

func readyStatus(ip string) corev1.PodStatus {
	return corev1.PodStatus{
		Phase: corev1.PodRunning,
		PodIP: ip,
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "agent", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}},
	}
}

func waitingStatus(reason string) corev1.PodStatus {
	return corev1.PodStatus{
		Phase: corev1.PodPending,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "agent",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "because"}}}},
	}
}

// kubelet plays the node for the fake client: each pod that appears is passed to
// script, and the pod it returns (nil: leave it alone) is written back. It stops at
// cleanup.
func kubelet(t *testing.T, cs *fakeClient, script func(p *corev1.Pod) *corev1.Pod) {
	t.Helper()
	w, err := cs.CoreV1().Pods("").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || ev.Type != watch.Added {
				continue
			}
			if np := script(p.DeepCopy()); np != nil {
				if _, err := cs.CoreV1().Pods(np.Namespace).Update(context.Background(), np, metav1.UpdateOptions{}); err != nil {
					t.Errorf("kubelet update %s: %v", np.Name, err)
				}
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); <-done })
}

// readyClient is a fake client holding objs whose kubelet makes every new pod
// Running and Ready on node-1 with IP ip.
func readyClient(t *testing.T, ip string, objs ...runtime.Object) *fakeClient {
	t.Helper()
	cs := newFakeClient(objs...)
	kubelet(t, cs, func(p *corev1.Pod) *corev1.Pod { return schedule(p, "node-1", readyStatus(ip)) })
	return cs
}

// schedule binds p to node and gives it status st.
func schedule(p *corev1.Pod, node string, st corev1.PodStatus) *corev1.Pod {
	p.Spec.NodeName = node
	p.Status = st
	return p
}

func podCount(t *testing.T, cs *fakeClient, ns string) int {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Items)
}

// Reconcile reads back what it needs of a pod the driver created from the pod alone.
func TestKubernetesPodReadBack(t *testing.T) {
	req := kubeReq("team_a.agent-1", 7)
	name := warmpool.PodName(req.ScopeID, req.Fence)
	p, err := podpolicy.AgentPod(req, name, "ns1", time.UnixMilli(1700000000123), podpolicy.Extras{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = readyStatus("127.1.0.9")
	got := kubePod(p)
	want := warmpool.Pod{ID: name, ScopeID: req.ScopeID, DeployVer: req.DeployVer, Fence: 7, Namespace: "ns1",
		SSEURL: "http://127.1.0.9:8080/sse", HealthURL: "http://127.1.0.9:8080/health", CreatedAt: 1700000000123}
	if got != want {
		t.Errorf("kubePod:\n got %+v\nwant %+v", got, want)
	}
	if !kubeOwnPod(p, req) {
		t.Error("kubeOwnPod: the pod of req is not its own")
	}
}

// A name made after a clash is still a DNS-1123 label, however long the scope id.
func TestKubernetesClashName(t *testing.T) {
	n := kubeClashName(warmpool.PodName(strings.Repeat("s", 63), 1234567890123))
	if errs := validation.IsDNS1123Label(n); len(errs) > 0 {
		t.Errorf("clash name %q: %v", n, errs)
	}
}

func TestKubernetesDeployReady(t *testing.T) {
	cs := readyClient(t, "127.1.0.5")
	var mu sync.Mutex
	var phases []DeployPhase
	k := mustKube(t, cs, func(c *Config) {
		c.OnPhase = func(ev PhaseEvent) {
			mu.Lock()
			defer mu.Unlock()
			if ev.ScopeID != "s1" {
				return
			}
			phases = append(phases, ev.Phase)
			if ev.Fence != 3 || ev.Namespace != "wp" || ev.Pod == "" || ev.Elapsed <= 0 {
				t.Errorf("phase event %+v", ev)
			}
		}
	})
	req := kubeReq("s1", 3)
	var reported []string
	req.OnPhase = func(phase string) { mu.Lock(); reported = append(reported, phase); mu.Unlock() }
	pod, err := k.Deploy(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Namespace != "wp" || pod.SSEURL != "http://127.1.0.5:8080/sse" || pod.HealthURL != "http://127.1.0.5:8080/health" {
		t.Errorf("pod %+v, want it in wp at 127.1.0.5:8080", pod)
	}
	mu.Lock()
	got, gotReported := fmt.Sprint(phases), fmt.Sprint(reported)
	mu.Unlock()
	if got != "[created scheduled started ready]" {
		t.Errorf("phases %s", got)
	}
	if gotReported != "[create scheduled started ready]" {
		t.Errorf("phases reported to the deploy request: %s", gotReported)
	}

	// A scope template's namespace wins over the default one.
	req = kubeReq("s2", 1)
	req.Spec.Namespace = "other"
	pod, err = k.Deploy(context.Background(), req)
	if err != nil || pod.Namespace != "other" || podCount(t, cs, "other") != 1 {
		t.Fatalf("namespace from template: %+v %v", pod, err)
	}
}

// TestKubernetesDeployDuplicate: a create that reached the server but whose answer was
// lost is retried, meets AlreadyExists with our own labels, and waits for that pod.
func TestKubernetesDeployDuplicate(t *testing.T) {
	cs := readyClient(t, "127.1.0.6")
	var creates atomic.Int32
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if creates.Add(1) > 1 {
			return false, nil, nil
		}
		obj := a.(k8stesting.CreateAction).GetObject()
		if err := cs.Tracker().Create(podsGVR, obj, a.GetNamespace()); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewServerTimeout(podsGVR.GroupResource(), "create", 1)
	})
	k := mustKube(t, cs, nil)
	pod, err := k.Deploy(context.Background(), kubeReq("dup", 9))
	if err != nil {
		t.Fatal(err)
	}
	if pod.ID != warmpool.PodName("dup", 9) || creates.Load() != 2 || podCount(t, cs, "wp") != 1 {
		t.Errorf("pod %s, %d creates, %d pods", pod.ID, creates.Load(), podCount(t, cs, "wp"))
	}
}

// TestKubernetesDeployClash: the name is held by a pod of another deploy (other fence);
// the driver retries with a fresh name and leaves the other pod alone.
func TestKubernetesDeployClash(t *testing.T) {
	other, err := podpolicy.AgentPod(kubeReq("clash", 99), warmpool.PodName("clash", 4), "wp", time.Now(), podpolicy.Extras{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := readyClient(t, "127.1.0.7", other)
	k := mustKube(t, cs, nil)
	pod, err := k.Deploy(context.Background(), kubeReq("clash", 4))
	if err != nil {
		t.Fatal(err)
	}
	base := warmpool.PodName("clash", 4)
	if !strings.HasPrefix(pod.ID, base+"-") || len(pod.ID) != len(base)+6 || pod.Fence != 4 {
		t.Errorf("pod %+v", pod)
	}
	if podCount(t, cs, "wp") != 2 {
		t.Errorf("%d pods, want the other one and ours", podCount(t, cs, "wp"))
	}

	// Every fresh name clashes too: bounded, then DEPLOY_FAILED.
	cs2 := newFakeClient()
	failPods(cs2, "create", apierrors.NewAlreadyExists(podsGVR.GroupResource(), "x"))
	cs2.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, other.DeepCopy(), nil
	})
	k2 := mustKube(t, cs2, func(c *Config) { c.NameRetries = 2 })
	_, err = k2.Deploy(context.Background(), kubeReq("clash", 4))
	if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed || !strings.Contains(err.Error(), "clashes") {
		t.Errorf("endless clash: %v", err)
	}
	if n := countActions(cs2, "create"); n != 3 {
		t.Errorf("%d creates, want 1 + 2 retries", n)
	}
}

// isDeployWatch tells Deploy's own watch (one pod by name) from informers' and the
// test kubelet's.
func isDeployWatch(a k8stesting.Action) bool {
	w, ok := a.(k8stesting.WatchAction)
	return ok && strings.Contains(w.GetWatchRestrictions().Fields.String(), "metadata.name")
}

func countActions(cs *fakeClient, verb string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "pods" {
			n++
		}
	}
	return n
}

// failPods makes every pod call of verb on cs fail with err; the counter counts the
// attempts.
func failPods(cs *fakeClient, verb string, err error) *atomic.Int32 {
	var n atomic.Int32
	cs.PrependReactor(verb, "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		return true, nil, err
	})
	return &n
}

func TestKubernetesRetries(t *testing.T) {
	t.Run("transient create retried", func(t *testing.T) {
		cs := readyClient(t, "127.1.0.8")
		var n atomic.Int32
		cs.PrependReactor("create", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			switch n.Add(1) {
			case 1:
				return true, nil, apierrors.NewInternalError(errors.New("etcd hiccup"))
			case 2:
				return true, nil, apierrors.NewTooManyRequests("slow down", 0)
			}
			return false, nil, nil
		})
		k := mustKube(t, cs, nil)
		if _, err := k.Deploy(context.Background(), kubeReq("r", 1)); err != nil {
			t.Fatal(err)
		}
		if n.Load() != 3 {
			t.Errorf("%d create attempts, want 3", n.Load())
		}
	})
	t.Run("403 not retried", func(t *testing.T) {
		cs := newFakeClient()
		n := failPods(cs, "create", apierrors.NewForbidden(podsGVR.GroupResource(), "x", errors.New("rbac says no")))
		k := mustKube(t, cs, nil)
		_, err := k.Deploy(context.Background(), kubeReq("r", 1))
		if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed || !strings.Contains(err.Error(), "forbidden") {
			t.Errorf("err %v", err)
		}
		if n.Load() != 1 {
			t.Errorf("%d attempts, want 1", n.Load())
		}
	})
	t.Run("retries bounded", func(t *testing.T) {
		cs := newFakeClient()
		n := failPods(cs, "delete", apierrors.NewServiceUnavailable("down"))
		k := mustKube(t, cs, func(c *Config) { c.Retries = 2 })
		if err := k.Delete(context.Background(), warmpool.Pod{ID: "p"}); !apierrors.IsServiceUnavailable(err) {
			t.Errorf("err %v", err)
		}
		if n.Load() != 3 {
			t.Errorf("%d attempts, want 3", n.Load())
		}
	})
	t.Run("transient classification", func(t *testing.T) {
		gr := podsGVR.GroupResource()
		for _, tc := range []struct {
			err  error
			want bool
		}{
			{apierrors.NewInternalError(errors.New("x")), true},
			{apierrors.NewServiceUnavailable("x"), true},
			{apierrors.NewTooManyRequests("x", 1), true},
			{apierrors.NewServerTimeout(gr, "get", 1), true},
			{apierrors.NewTimeoutError("x", 1), true},
			{errors.New("dial tcp: connection refused"), true},
			{context.DeadlineExceeded, true},
			{context.Canceled, false},
			{apierrors.NewForbidden(gr, "x", errors.New("no")), false},
			{apierrors.NewNotFound(gr, "x"), false},
			{apierrors.NewAlreadyExists(gr, "x"), false},
			{apierrors.NewBadRequest("x"), false},
			{apierrors.NewUnauthorized("x"), false},
			{apierrors.NewConflict(gr, "x", errors.New("c")), false},
		} {
			if got := transient(tc.err); got != tc.want {
				t.Errorf("transient(%v) = %v", tc.err, got)
			}
		}
	})
}

// TestKubernetesDeployEarlyFailure: each hopeless state ends the wait at once (the
// ready timeout is 30 s) with DEPLOY_FAILED naming it, and the pod is deleted again.
func TestKubernetesDeployEarlyFailure(t *testing.T) {
	terminated := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "agent",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 3}}}}}
	unschedulable := corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."}}}
	for _, tc := range []struct {
		name   string
		script func(p *corev1.Pod) *corev1.Pod
		want   string
	}{
		{"ErrImagePull", func(p *corev1.Pod) *corev1.Pod { return schedule(p, "n", waitingStatus("ErrImagePull")) }, "ErrImagePull"},
		{"ImagePullBackOff", func(p *corev1.Pod) *corev1.Pod { return schedule(p, "n", waitingStatus("ImagePullBackOff")) }, "ImagePullBackOff"},
		{"InvalidImageName", func(p *corev1.Pod) *corev1.Pod { return schedule(p, "n", waitingStatus("InvalidImageName")) }, "invalid image name"},
		{"CrashLoopBackOff", func(p *corev1.Pod) *corev1.Pod { return schedule(p, "n", waitingStatus("CrashLoopBackOff")) }, "crash loop"},
		{"terminated", func(p *corev1.Pod) *corev1.Pod { return schedule(p, "n", terminated) }, "terminated (Error, exit code 3)"},
		{"failed", func(p *corev1.Pod) *corev1.Pod {
			return schedule(p, "n", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfmemory", Message: "oom"})
		}, "failed: OutOfmemory: oom"},
		{"succeeded", func(p *corev1.Pod) *corev1.Pod { return schedule(p, "n", corev1.PodStatus{Phase: corev1.PodSucceeded}) }, "succeeded"},
		{"evicted", func(p *corev1.Pod) *corev1.Pod {
			return schedule(p, "n", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "low on memory"})
		}, "evicted: low on memory"},
		{"unschedulable", func(p *corev1.Pod) *corev1.Pod { p.Status = unschedulable; return p }, "unschedulable"},
		{"deleted", nil, "deleted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newFakeClient()
			script := tc.script
			created := make(chan struct{})
			if script == nil {
				// The pod is deleted behind the driver's back once its create has
				// answered: the fake's create reads the pod back after storing it, so a
				// delete on the Added event alone could beat that read and fail the
				// create itself, which a real server never does.
				script = func(p *corev1.Pod) *corev1.Pod {
					<-created
					if err := cs.Tracker().Delete(podsGVR, p.Namespace, p.Name); err != nil {
						t.Error(err)
					}
					return nil
				}
			}
			kubelet(t, cs, script)
			var failedEv atomic.Pointer[PhaseEvent]
			k := mustKube(t, cs, func(c *Config) {
				c.OnPhase = func(ev PhaseEvent) {
					switch ev.Phase {
					case PhaseCreated:
						close(created)
					case PhaseFailed:
						failedEv.Store(&ev)
					}
				}
			})
			start := time.Now()
			_, err := k.Deploy(context.Background(), kubeReq("early", 1))
			if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want DEPLOY_FAILED with %q", err, tc.want)
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s", took)
			}
			if podCount(t, cs, "wp") != 0 {
				t.Error("pod of a failed deploy left behind")
			}
			if ev := failedEv.Load(); ev == nil || ev.Reason != err.Error() {
				t.Errorf("failed phase event %+v", ev)
			}
		})
	}
}

// TestKubernetesUnschedulableGrace: a pod reported unschedulable once and then
// scheduled within the grace is not failed.
func TestKubernetesUnschedulableGrace(t *testing.T) {
	cs := newFakeClient()
	kubelet(t, cs, func(p *corev1.Pod) *corev1.Pod {
		p.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}}
		return p
	})
	k := mustKube(t, cs, func(c *Config) { c.UnschedulableGrace = time.Minute })
	var phases sync.Map
	k.cfg.OnPhase = func(ev PhaseEvent) { phases.Store(ev.Phase, ev) }
	errc := make(chan error, 1)
	go func() {
		_, err := k.Deploy(context.Background(), kubeReq("grace", 1))
		errc <- err
	}()
	// Wait until the driver has seen the unschedulable state, then let a node free up.
	name := warmpool.PodName("grace", 1)
	w, err := cs.CoreV1().Pods("wp").Watch(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Name == name && p.Status.Phase == corev1.PodPending && len(p.Status.Conditions) > 0 {
			break
		}
	}
	w.Stop()
	p, err := cs.CoreV1().Pods("wp").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("wp").Update(context.Background(), schedule(p, "n", readyStatus("127.1.0.3")), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("deploy failed within the grace: %v", err)
	}
}

// TestKubernetesDeploysShareOneWatch: deploys wait on the namespace's informer, so
// however many are in flight the API server serves one pod watch of the namespace and
// none per deploy (issue 22: each deploy used to open a watch of its own pod).
func TestKubernetesDeploysShareOneWatch(t *testing.T) {
	cs := readyClient(t, "127.1.0.4")
	k := mustKube(t, cs, func(c *Config) { c.DisableNodeWatch = true })
	deployAll(t, context.Background(), k, "share", 5)
	watches, own := 0, 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "watch" && a.GetResource().Resource == "pods" && a.GetNamespace() == "wp" { // not the test's kubelet
			watches++
			if isDeployWatch(a) {
				own++
			}
		}
	}
	if own != 0 || watches != 1 {
		t.Errorf("5 deploys opened %d pod watches, %d of them of one pod: want the informer's one", watches, own)
	}
}

func TestKubernetesPodDeath(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	grace := 30 * time.Second
	pod := func(mut func(p *corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}, Status: readyStatus("127.1.0.1")}
		if mut != nil {
			mut(p)
		}
		return p
	}
	node := func(status corev1.ConditionStatus, since time.Duration) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-since))}}}}
	}
	readyNode := node(corev1.ConditionTrue, time.Hour)
	deleting := metav1.NewTime(now)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		node *corev1.Node
		want string // prefix; "" = alive
	}{
		{"alive", pod(nil), readyNode, ""},
		{"pending, unbound, node unknown", pod(func(p *corev1.Pod) { p.Spec.NodeName = ""; p.Status = corev1.PodStatus{Phase: corev1.PodPending} }), nil, ""},
		{"gone", nil, readyNode, "deleted"},
		{"terminating", pod(func(p *corev1.Pod) { p.DeletionTimestamp = &deleting }), readyNode, "deleted: pod is terminating"},
		{"failed", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed; p.Status.Reason = "Boom" }), readyNode, "failed: Boom"},
		{"failed with exit", pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}}
		}), readyNode, "failed: container agent terminated (OOMKilled, exit code 137)"},
		{"succeeded", pod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), readyNode, "succeeded"},
		{"evicted", pod(func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.Reason = "Evicted"
			p.Status.Message = "disk"
		}), readyNode, "evicted: disk"},
		{"disruption target", pod(func(p *corev1.Pod) {
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "PreemptionByScheduler"})
		}), readyNode, "evicted: PreemptionByScheduler"},
		{"node gone", pod(nil), nil, "node-lost: node n1 is gone"},
		{"node deleting", pod(nil), func() *corev1.Node { n := readyNode.DeepCopy(); n.DeletionTimestamp = &deleting; return n }(), "node-lost: node n1 is being deleted"},
		{"node NotReady within grace", pod(nil), node(corev1.ConditionFalse, 10*time.Second), ""},
		{"node NotReady past grace", pod(nil), node(corev1.ConditionFalse, time.Minute), "node-lost: node n1 Ready=False for 1m0s"},
		{"node Unknown past grace", pod(nil), node(corev1.ConditionUnknown, grace), "node-lost: node n1 Ready=Unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := PodDeath(tc.pod, tc.node, now, grace)
			if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
				t.Errorf("PodDeath = %q, want prefix %q", got, tc.want)
			}
		})
	}
	// Without node information only the pod's own status counts.
	if got := kubePodDeath(pod(nil), nil, false, now, grace); got != "" {
		t.Errorf("node unknown: %q", got)
	}
}

func TestKubernetesList(t *testing.T) {
	mk := func(scope string, fence int64, node string, st corev1.PodStatus) *corev1.Pod {
		p, err := podpolicy.AgentPod(kubeReq(scope, fence), warmpool.PodName(scope, fence), "wp", time.UnixMilli(1000), podpolicy.Extras{Grace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return schedule(p, node, st)
	}
	alive := mk("alive", 1, "n1", readyStatus("127.1.0.1"))
	failed := mk("failed", 1, "n1", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Error"})
	orphaned := mk("orphan", 1, "gone-node", readyStatus("127.1.0.2"))
	sick := mk("sick", 1, "n2", readyStatus("127.1.0.3"))
	pending := mk("pending", 1, "", corev1.PodStatus{Phase: corev1.PodPending})
	foreign := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "not-ours", Namespace: "wp", Labels: map[string]string{"app": "x"}}}
	n1 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	n2 := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour))}}}}
	cs := newFakeClient(alive, failed, orphaned, sick, pending, foreign, n1, n2)

	events := make(chan warmpool.Pod, 100)
	k := mustKube(t, cs, func(c *Config) { c.OnPod = func(p warmpool.Pod) { events <- p } })
	podEvents := make(chan warmpool.PodEvent, 100)
	k.OnPodEvent(func(ev warmpool.PodEvent) { podEvents <- ev })
	pods, err := k.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]warmpool.Pod{}
	for _, p := range pods {
		got[p.ScopeID] = p
	}
	if len(pods) != 5 {
		t.Fatalf("%d pods, want 5 managed ones: %+v", len(pods), pods)
	}
	check := func(scope string, ready bool, deadPrefix string) {
		t.Helper()
		p := got[scope]
		if p.Ready != ready || !strings.HasPrefix(p.Dead, deadPrefix) || (deadPrefix == "") != (p.Dead == "") {
			t.Errorf("%s: ready %v dead %q, want ready %v dead %q", scope, p.Ready, p.Dead, ready, deadPrefix)
		}
	}
	check("alive", true, "")
	check("failed", false, "failed")
	check("orphan", false, "node-lost")
	check("sick", false, "node-lost")
	check("pending", false, "")
	if a := got["alive"]; a.ID != alive.Name || a.Namespace != "wp" || a.SSEURL != "http://127.1.0.1:8080/sse" || a.CreatedAt != 1000 || a.Fence != 1 {
		t.Errorf("alive %+v", a)
	}

	// Steady state: List is served from the cache; a new pod shows up through the watch.
	lists := countActions(cs, "list")
	if _, err := cs.CoreV1().Pods("wp").Create(context.Background(), mk("late", 2, "n1", readyStatus("127.1.0.9")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.ScopeID == "late" {
			break
		}
	}
	pods, err = k.List(context.Background())
	if err != nil || len(pods) != 6 {
		t.Fatalf("after create: %d pods, %v", len(pods), err)
	}
	if n := countActions(cs, "list"); n != lists {
		t.Errorf("List made %d API list calls; want none from the cache", n-lists)
	}

	// A deletion reaches OnPod as a death.
	if err := cs.CoreV1().Pods("wp").Delete(context.Background(), alive.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.ID == alive.Name && strings.HasPrefix(ev.Dead, DeathDeleted) {
			break
		}
	}
	// OnPodEvent hears of every managed pod as the informer lists it (the dead ones
	// dead), of the late pod as it appears, and of the deletion as the pod gone; of
	// nothing that is not warmpool's, and of nothing gone but the deleted pod.
	seen := map[string]warmpool.PodEvent{}
	for ev := range podEvents {
		if ev.Pod.ScopeID == "" || ev.Pod.ID == foreign.Name {
			t.Fatalf("OnPodEvent reported a pod that is not warmpool's: %+v", ev)
		}
		if ev.Gone != (ev.Pod.ID == alive.Name && strings.HasPrefix(ev.Pod.Dead, DeathDeleted)) || (ev.Gone && ev.Pod.Ready) {
			t.Fatalf("OnPodEvent reported %+v: gone only for the deleted pod, and then not Ready", ev)
		}
		seen[ev.Pod.ScopeID] = ev
		if ev.Gone {
			break
		}
	}
	for scope, dead := range map[string]string{"failed": "failed", "orphan": "node-lost", "sick": "node-lost", "pending": "", "late": ""} {
		ev, ok := seen[scope]
		if !ok || !strings.HasPrefix(ev.Pod.Dead, dead) || (dead == "") != (ev.Pod.Dead == "") {
			t.Errorf("OnPodEvent of %s: %+v (reported %v), want dead %q", scope, ev, ok, dead)
		}
	}
	if late := seen["late"]; !late.Pod.Ready {
		t.Errorf("OnPodEvent of the late pod %+v, want it Ready", late)
	}

	// A node that goes away re-judges its pods at once.
	if err := cs.CoreV1().Nodes().Delete(context.Background(), "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for ev := range events {
		if ev.ScopeID == "late" && strings.HasPrefix(ev.Dead, DeathNodeLost) {
			break
		}
	}

	// Another namespace joins the list once watched.
	other := mk("elsewhere", 1, "n3", readyStatus("127.1.0.10"))
	other.Namespace = "ns2"
	if _, err := cs.CoreV1().Pods("ns2").Create(context.Background(), other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.WatchNamespace(context.Background(), "ns2"); err != nil {
		t.Fatal(err)
	}
	pods, _ = k.List(context.Background())
	found := false
	for _, p := range pods {
		found = found || (p.Namespace == "ns2" && p.ScopeID == "elsewhere" && p.Dead == DeathNodeLost+": node n3 is gone")
	}
	if !found {
		t.Errorf("ns2 pod missing: %+v", pods)
	}

	if err := k.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := k.List(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("List after Close: %v", err)
	}
}

// TestKubernetesListNodesForbidden: with RBAC forbidding nodes (the shipped Role), List
// still works and judges pods by their own status.
func TestKubernetesListNodesForbidden(t *testing.T) {
	p, err := podpolicy.AgentPod(kubeReq("s", 1), warmpool.PodName("s", 1), "wp", time.Now(), podpolicy.Extras{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := newFakeClient(schedule(p, "unknown-node", readyStatus("127.1.0.1")))
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("no"))
	})
	k := mustKube(t, cs, nil)
	pods, err := k.List(context.Background())
	if err != nil || len(pods) != 1 || !pods[0].Ready || pods[0].Dead != "" {
		t.Fatalf("pods %+v err %v", pods, err)
	}
}

func TestKubernetesListCacheNotSynced(t *testing.T) {
	cs := newFakeClient()
	failPods(cs, "list", apierrors.NewForbidden(podsGVR.GroupResource(), "", errors.New("rbac says no")))
	k := mustKube(t, cs, func(c *Config) { c.CacheSyncTimeout = 300 * time.Millisecond; c.DisableNodeWatch = true })
	if _, err := k.List(context.Background()); err == nil || !strings.Contains(err.Error(), "not synced") {
		t.Errorf("err %v; an unsynced cache must not pass for an empty list", err)
	}
}

// TestKubernetesInformers: the pod informer lists and watches only managed pods of its
// namespace, the node informer every node, and both resync every ResyncPeriod.
func TestKubernetesInformers(t *testing.T) {
	p, err := podpolicy.AgentPod(kubeReq("inf", 1), warmpool.PodName("inf", 1), "wp", time.Now(), podpolicy.Extras{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := newFakeClient(schedule(p, "n1", readyStatus("127.1.0.1")))
	seen := make(chan warmpool.Pod, 100)
	k := mustKube(t, cs, func(c *Config) {
		c.ResyncPeriod = time.Second // client-go's least
		c.OnPod = func(p warmpool.Pod) { seen <- p }
	})
	if _, err := k.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Nothing changes, yet the pod comes back after its add: the resync.
	timeout := time.After(10 * time.Second)
	for i := range 2 {
		select {
		case p := <-seen:
			if p.ID != warmpool.PodName("inf", 1) {
				t.Fatalf("OnPod saw %+v", p)
			}
		case <-timeout:
			t.Fatalf("OnPod saw the pod %d times in 10s; want its add and a resync", i)
		}
	}
	verbs := map[string]int{}
	for _, a := range cs.Actions() {
		if (a.GetVerb() != "list" && a.GetVerb() != "watch") || isDeployWatch(a) {
			continue
		}
		sel := labels.Everything()
		switch a := a.(type) {
		case k8stesting.ListAction:
			sel = a.GetListRestrictions().Labels
		case k8stesting.WatchAction:
			sel = a.GetWatchRestrictions().Labels
		}
		res := a.GetResource().Resource
		verbs[res+" "+a.GetVerb()]++
		switch {
		case res == "pods" && (a.GetNamespace() != "wp" || sel.String() != managedSelector):
			t.Errorf("pod informer %s in namespace %q selecting %q; want %q in wp", a.GetVerb(), a.GetNamespace(), sel, managedSelector)
		case res == "nodes" && (a.GetNamespace() != "" || !sel.Empty()):
			t.Errorf("node informer %s in namespace %q selecting %q; want every node", a.GetVerb(), a.GetNamespace(), sel)
		}
	}
	for _, want := range []string{"pods list", "pods watch", "nodes list", "nodes watch"} {
		if verbs[want] == 0 {
			t.Errorf("no %s by the informers: %v", want, verbs)
		}
	}
}

// TestKubernetesDelete: Delete gives the pod the configured grace period.
func TestKubernetesDelete(t *testing.T) {
	cs := newFakeClient(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: "wp"}})
	k := mustKube(t, cs, nil)
	if err := k.Delete(context.Background(), warmpool.Pod{ID: "p1"}); err != nil {
		t.Fatal(err)
	}
	var grace *int64
	for _, a := range cs.Actions() {
		if da, ok := a.(k8stesting.DeleteAction); ok {
			grace = da.GetDeleteOptions().GracePeriodSeconds
		}
	}
	if podCount(t, cs, "wp") != 0 || grace == nil || *grace != 5 {
		t.Errorf("%d pods left, grace %v; want none left, grace 5", podCount(t, cs, "wp"), grace)
	}
}

func TestKubernetesProbe(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			w.WriteHeader(http.StatusOK)
		case "/slow":
			select {
			case <-block:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	defer close(block)
	k := mustKube(t, newFakeClient(), func(c *Config) { c.ProbeTimeout = 200 * time.Millisecond })
	ctx := context.Background()
	if err := k.Probe(ctx, warmpool.Pod{ID: "p", HealthURL: srv.URL + "/health"}); err != nil {
		t.Errorf("healthy: %v", err)
	}
	if err := k.Probe(ctx, warmpool.Pod{ID: "p", HealthURL: srv.URL + "/sick"}); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("sick: %v", err)
	}
	start := time.Now()
	if err := k.Probe(ctx, warmpool.Pod{ID: "p", HealthURL: srv.URL + "/slow"}); err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("slow: %v after %s", err, time.Since(start))
	}
	if err := k.Probe(ctx, warmpool.Pod{ID: "p"}); err == nil {
		t.Error("no url: nil error")
	}
}

func TestKubernetesRESTConfig(t *testing.T) {
	path := t.TempDir() + "/kubeconfig"
	kc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:16443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u, namespace: agents}
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, ns, err := RESTConfig(ClientOptions{Kubeconfig: path})
	if err != nil {
		t.Fatal(err)
	}
	if ns != "agents" || cfg.Host != "https://127.0.0.1:16443" || cfg.BearerToken != "secret" ||
		cfg.QPS >= 0 || cfg.RateLimiter != nil || !cfg.DisableCompression || cfg.UserAgent != "warmpool" {
		t.Errorf("ns %q cfg %+v", ns, cfg)
	}
	if _, _, err := NewClient(ClientOptions{Kubeconfig: path, QPS: 5, Burst: 7}); err != nil {
		t.Error(err)
	}
	if _, _, err := RESTConfig(ClientOptions{Kubeconfig: path + ".missing"}); err == nil {
		t.Error("missing kubeconfig: no error")
	}
}

// A failed deploy returns only once its pod is gone: the deploy slot it holds keeps a
// next deploy from adding a pod beside one the API server still has.
func TestKubernetesFailedDeployCleanup(t *testing.T) {
	short := func(c *Config) {
		c.Retries, c.CreateSettle, c.CleanupTimeout = -1, 20*time.Millisecond, 5*time.Second
	}
	t.Run("a create without an answer, applied late", func(t *testing.T) {
		cs := newFakeClient()
		req := kubeReq("late", 3)
		name := warmpool.PodName(req.ScopeID, req.Fence)
		late, err := podpolicy.AgentPod(req, name, "wp", time.Now(), podpolicy.Extras{Grace: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		failPods(cs, "create", apierrors.NewServerTimeout(podsGVR.GroupResource(), "create", 1))
		var gets atomic.Int32
		cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			if gets.Add(1) > 1 {
				return false, nil, nil
			}
			// The server answers that there is no such pod, then applies the create
			// it was sent while it did not answer.
			if err := cs.Tracker().Add(late); err != nil {
				t.Error(err)
			}
			return true, nil, apierrors.NewNotFound(podsGVR.GroupResource(), name)
		})
		k := mustKube(t, cs, short)
		_, err = k.Deploy(context.Background(), req)
		if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed {
			t.Fatalf("deploy: %v, want DEPLOY_FAILED", err)
		}
		if n := podCount(t, cs, "wp"); n != 0 || gets.Load() != 2 {
			t.Errorf("after the failed deploy: %d pods, %d gets; want the late pod deleted after a second look", n, gets.Load())
		}
	})
	neverReady := func(t *testing.T, deletes func(cs *fakeClient) *atomic.Int32, mutate func(*Config)) (*fakeClient, *atomic.Int32, error) {
		cs := newFakeClient()
		n := deletes(cs)
		k := mustKube(t, cs, mutate)
		req := kubeReq("stuck", 4)
		req.Spec.ReadyTimeoutS = 1
		_, err := k.Deploy(context.Background(), req)
		return cs, n, err
	}
	t.Run("its delete retried until the server answers", func(t *testing.T) {
		cs, n, err := neverReady(t, func(cs *fakeClient) *atomic.Int32 {
			var n atomic.Int32
			cs.PrependReactor("delete", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
				if n.Add(1) <= 3 {
					return true, nil, apierrors.NewServiceUnavailable("stopped")
				}
				return false, nil, nil
			})
			return &n
		}, short)
		if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed {
			t.Fatalf("deploy: %v, want DEPLOY_FAILED", err)
		}
		if c := podCount(t, cs, "wp"); c != 0 || n.Load() != 4 {
			t.Errorf("after the failed deploy: %d pods, %d deletes; want 0 after 4", c, n.Load())
		}
	})
	t.Run("not retried on a final answer", func(t *testing.T) {
		cs, n, err := neverReady(t, func(cs *fakeClient) *atomic.Int32 {
			return failPods(cs, "delete", apierrors.NewForbidden(podsGVR.GroupResource(), "x", errors.New("rbac says no")))
		}, short)
		if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed {
			t.Fatalf("deploy: %v, want DEPLOY_FAILED", err)
		}
		if c := podCount(t, cs, "wp"); c != 1 || n.Load() != 1 {
			t.Errorf("%d pods, %d deletes; want the pod left after one refused delete", c, n.Load())
		}
	})
	t.Run("for CleanupTimeout at most", func(t *testing.T) {
		start := time.Now()
		cs, n, err := neverReady(t, func(cs *fakeClient) *atomic.Int32 {
			return failPods(cs, "delete", apierrors.NewServiceUnavailable("stopped"))
		}, func(c *Config) { short(c); c.CleanupTimeout = 300 * time.Millisecond })
		if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed {
			t.Fatalf("deploy: %v, want DEPLOY_FAILED", err)
		}
		if took := time.Since(start); took > 1*time.Second+300*time.Millisecond+time.Second {
			t.Errorf("deploy returned after %s: the cleanup is not bounded", took)
		}
		if c := podCount(t, cs, "wp"); c != 1 || n.Load() < 2 {
			t.Errorf("%d pods, %d deletes; want the pod left after retries", c, n.Load())
		}
	})
}

// TestKubernetesStopsIdleInformers: the informer of a namespace that holds no pod and
// waits for no deploy any more is stopped; the driver's own namespace keeps its one.
func TestKubernetesStopsIdleInformers(t *testing.T) {
	cs := readyClient(t, "127.1.0.5")
	k := mustKube(t, cs, func(c *Config) { c.DisableNodeWatch = true; c.InformerIdle = time.Nanosecond })
	req := kubeReq("elsewhere", 1)
	req.Spec.Namespace = "other"
	pod, err := k.Deploy(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	informers := func() []string {
		k.mu.Lock()
		defer k.mu.Unlock()
		return slices.Sorted(maps.Keys(k.caches))
	}
	if _, err := k.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := informers(); !slices.Equal(got, []string{"other", "wp"}) {
		t.Fatalf("informers %v while a pod runs in other: want other and wp", got)
	}
	if err := k.Delete(context.Background(), pod); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the pod gone from the informer of other", func() bool {
		k.mu.Lock()
		c := k.caches["other"]
		k.mu.Unlock()
		return c != nil && len(c.informer.GetStore().ListKeys()) == 0
	})
	if _, err := k.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := informers(); !slices.Equal(got, []string{"wp"}) {
		t.Errorf("informers %v once other holds nothing: want wp alone", got)
	}
}

// An API server error reaches a gateway with its own message, never the cluster's
// internal address.
func TestAPIMessageHidesTheServer(t *testing.T) {
	err := errors.New(`Post "https://10.96.0.1:443/api/v1/namespaces/wp/pods": dial tcp 10.96.0.1:443: connect: connection refused`)
	if got := apiMessage(err); strings.Contains(got, "10.96.0.1") || strings.Contains(got, "/api/v1") || !strings.Contains(got, "connection refused") {
		t.Errorf("apiMessage = %q: the request URL is shown", got)
	}
	st := apierrors.NewForbidden(podsGVR.GroupResource(), "p", errors.New("exceeded quota"))
	if got := apiMessage(st); !strings.Contains(got, "exceeded quota") {
		t.Errorf("apiMessage = %q: want the server's message", got)
	}
}

// A pod whose node was gone before the node cache filled is reported dead once it has
// filled: its first event judged it without node state, and no node event follows.
func TestKubernetesNodeCacheLateJudgesPodsAgain(t *testing.T) {
	p, err := podpolicy.AgentPod(kubeReq("orphan", 1), warmpool.PodName("orphan", 1), "wp", time.UnixMilli(1000), podpolicy.Extras{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	cs := newFakeClient(schedule(p, "gone-node", readyStatus("127.1.0.2")))
	// The node list fails until the gate opens (a reactor must not block: the fake
	// client runs reactors under its lock); the reflector lists again after a backoff.
	var open atomic.Bool
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !open.Load() {
			return true, nil, errors.New("nodes not listed yet")
		}
		return false, nil, nil
	})
	k := mustKube(t, cs, nil)
	events := make(chan warmpool.PodEvent, 100)
	k.OnPodEvent(func(ev warmpool.PodEvent) { events <- ev })
	if err := k.WatchNamespace(context.Background(), "wp"); err != nil {
		t.Fatal(err)
	}
	first := <-events
	if first.Pod.Dead != "" {
		t.Fatalf("first event %+v: judged dead before the node cache filled", first)
	}
	open.Store(true)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if strings.HasPrefix(ev.Pod.Dead, DeathNodeLost) {
				return
			}
		case <-timeout:
			t.Fatal("the pod on the gone node was never reported dead after the node cache filled")
		}
	}
}

// A pod informer whose list fails tells the event functions to list again (a Resync
// event): until the informer has listed, its events may miss changes.
func TestKubernetesInformerErrorAsksForResync(t *testing.T) {
	cs := newFakeClient()
	var failed atomic.Bool
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed.CompareAndSwap(false, true) {
			return true, nil, errors.New("pods not listed")
		}
		return false, nil, nil
	})
	k := mustKube(t, cs, nil)
	events := make(chan warmpool.PodEvent, 100)
	k.OnPodEvent(func(ev warmpool.PodEvent) { events <- ev })
	if err := k.WatchNamespace(context.Background(), "wp"); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if !ev.Resync || ev.Pod.ID != "" {
			t.Fatalf("event %+v, want a Resync event", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a failed pod list told the event functions nothing")
	}
}
