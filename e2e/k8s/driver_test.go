//go:build e2e_k8s

// Package k8s_e2e proves the kubernetes pod driver against a real kube-apiserver (with
// etcd, kube-scheduler and kwok as the kubelet), started by scripts/k8s-up.sh, and
// (service_test.go) a whole replica routing through it on a real redis-server; run it
// with `make e2e-k8s`, which sets WARMPOOL_KUBECONFIG and REDIS_ADDR. A "kubelet shim" in the test
// serves HTTP on each running pod's IP and port (kwok hands out 127.1.x.y loopback
// addresses), so health probes and SSE reach something real.
package k8s_e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/drivertest"
	"github.com/warmpool/warmpool/internal/testing/manifests"
	"github.com/warmpool/warmpool/k8s"
	"github.com/warmpool/warmpool/podpolicy"
)

// holdAnnotation keeps kwok from making a pod Running (scripts/k8s-up.sh stage knob), so
// the test can play a kubelet that fails to pull the image.
const holdAnnotation = "k8srig.io/hold"

var (
	adminCfg *rest.Config
	admin    kubernetes.Interface
	shim     *kubeletShim
)

func TestMain(m *testing.M) {
	path := os.Getenv("WARMPOOL_KUBECONFIG")
	if path == "" {
		fmt.Fprintln(os.Stderr, "WARMPOOL_KUBECONFIG is not set: start the rig with scripts/k8s-up.sh (or run make e2e-k8s)")
		os.Exit(2)
	}
	var err error
	if adminCfg, _, err = k8s.RESTConfig(k8s.ClientOptions{Kubeconfig: path}); err == nil {
		admin, err = kubernetes.NewForConfig(adminCfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, cancel := context.WithCancel(context.Background())
	shim = startShim(ctx, admin)
	code := m.Run()
	cancel()
	shim.wait()
	os.Exit(code)
}

// ---------- the kubelet shim ----------

// kubeletShim serves, for every Running managed pod with an IP, the pod's health path
// (200) and SSE path (an event stream) on podIP:port, like the agent would.
type kubeletShim struct {
	mu      sync.Mutex
	servers map[string]*podServer // podIP:port -> server
	serving map[string]chan struct{}
	wg      sync.WaitGroup
}

type podServer struct {
	uid string
	srv *http.Server
}

func startShim(ctx context.Context, cs kubernetes.Interface) *kubeletShim {
	s := &kubeletShim{servers: map[string]*podServer{}, serving: map[string]chan struct{}{}}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sel := warmpool.LabelManagedBy + "=" + warmpool.ManagedByValue
		for ctx.Err() == nil {
			w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				time.Sleep(200 * time.Millisecond) // API hiccup: the shim just tries again
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				if ev.Type == watch.Deleted || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
					s.stop(p)
				} else if p.Status.PodIP != "" {
					s.serve(p)
				}
			}
			w.Stop()
		}
		s.mu.Lock()
		for addr, ps := range s.servers {
			_ = ps.srv.Close()
			delete(s.servers, addr)
		}
		s.mu.Unlock()
	}()
	return s
}

func shimAddr(p *corev1.Pod) string {
	port := p.Annotations[podpolicy.AnnotationPort]
	if port == "" {
		return ""
	}
	return net.JoinHostPort(p.Status.PodIP, port)
}

func (s *kubeletShim) serve(p *corev1.Pod) {
	addr := shimAddr(p)
	if addr == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.servers[addr]; old != nil {
		if old.uid == string(p.UID) {
			return
		}
		_ = old.srv.Close() // kwok reuses a freed IP at once
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kubelet shim: listen %s for %s: %v\n", addr, p.Name, err)
		return
	}
	name, health, sse := p.Name, p.Annotations[podpolicy.AnnotationHealthPath], p.Annotations[podpolicy.AnnotationSSEPath]
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+health, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET "+sse, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = fmt.Fprintf(w, "event: hello\ndata: {\"pod\":%q}\n\n", name) // the agent's client reports a stream that never came
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.servers[addr] = &podServer{uid: string(p.UID), srv: srv}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); _ = srv.Serve(ln) }()
	if ch := s.serving[addr]; ch != nil {
		close(ch)
		delete(s.serving, addr)
	}
}

func (s *kubeletShim) stop(p *corev1.Pod) {
	addr := shimAddr(p)
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.servers[addr]; old != nil && old.uid == string(p.UID) {
		_ = old.srv.Close()
		delete(s.servers, addr)
	}
}

// servingCh is closed once something serves addr for the pod with uid.
func (s *kubeletShim) servingCh(addr, uid string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if ps := s.servers[addr]; ps != nil && ps.uid == uid {
		close(ch)
		return ch
	}
	if old := s.serving[addr]; old != nil {
		return old
	}
	s.serving[addr] = ch
	return ch
}

func (s *kubeletShim) wait() { s.wg.Wait() }

// ---------- helpers ----------

// mustNamespace creates a fresh namespace for one test, with the "default"
// ServiceAccount the rig's ServiceAccount admission looks up for every pod that names
// none (a cluster's controller manager creates it; the rig runs none).
func mustNamespace(t *testing.T) string {
	t.Helper()
	ns := fmt.Sprintf("e2e-%s-%04x", strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())), rand.IntN(0x10000))
	if len(ns) > 63 {
		ns = ns[len(ns)-63:]
		ns = strings.TrimLeft(ns, "-")
	}
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// mustDriver returns a driver on cs in ns, closed at cleanup.
func mustDriver(t *testing.T, cs kubernetes.Interface, ns string, mutate func(*k8s.Config)) *k8s.Kubernetes {
	t.Helper()
	cfg := k8s.Config{
		Namespace:          ns,
		UnschedulableGrace: time.Second,
		Logger:             slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	d := k8s.NewKubernetes(cs.CoreV1(), cfg)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func deployReq(scope string, fence int64, readyTimeoutS int) warmpool.DeployRequest {
	cfg := warmpool.DefaultScopeConfig()
	cfg.Deploy.ReadyTimeoutS = readyTimeoutS
	cfg.Deploy.Env = map[string]string{"SCOPE": scope}
	if err := cfg.Normalize(); err != nil {
		panic(err)
	}
	return warmpool.DeployRequest{ScopeID: scope, DeployVer: cfg.Deploy.DeployVer(), Fence: fence, Spec: cfg.Deploy}
}

// waitGone waits (with a watch) until the pod is gone from the API server.
func waitGone(t *testing.T, ns, name string, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	pods := admin.CoreV1().Pods(ns)
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if err != nil {
			t.Fatalf("pod %s/%s still there after %s: %v", ns, name, within, err)
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: p.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Deleted {
				w.Stop()
				return
			}
		}
		w.Stop()
	}
}

// waitPod waits (with a watch) for the first pod in ns for which ok holds.
func waitPod(ns string, within time.Duration, ok func(*corev1.Pod) bool) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	w, err := admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if p, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type != watch.Deleted && ok(p) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no matching pod in %s within %s", ns, within)
}

// setPodStatus plays the kubelet of pod ns/name: it changes the pod's status with
// mutate through a status update.
func setPodStatus(ns, name string, mutate func(*corev1.PodStatus)) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(&cur.Status)
		_, err = admin.CoreV1().Pods(ns).UpdateStatus(context.Background(), cur, metav1.UpdateOptions{})
		return err
	})
}

// failImagePull plays a kubelet that cannot pull the image of a held pod: the
// container waits with ErrImagePull.
func failImagePull(ns, name, container, image string) error {
	return setPodStatus(ns, name, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodPending
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: container, Image: image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull",
				Message: "failed to resolve reference " + strconv.Quote(image)}}}}
	})
}

// ---------- the suite, run as admin and as the least-privilege ServiceAccount ----------

func TestDriverAdmin(t *testing.T) {
	t.Run("Conformance", func(t *testing.T) { conformance(t, admin, mustNamespace) })
	driverSuiteIn(t, admin, mustNamespace(t))
	t.Run("NodeDeleted", func(t *testing.T) { testNodeDeleted(t, admin, mustNamespace(t)) })
}

// TestDriverLeastPrivilege runs the same suite with a token of the ServiceAccount that
// deploy/base binds to its Role (pods, and get on secrets).
func TestDriverLeastPrivilege(t *testing.T) {
	ns := mustNamespace(t)
	sa := saClient(t, ns)
	ctx := context.Background()
	// The Role is really that narrow: a secret may be read by name, not listed.
	if _, err := sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list secrets: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list nodes: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Pods("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list pods of another namespace: %v, want Forbidden", err)
	}
	if _, err := sa.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list pods of its namespace: %v", err)
	}
	t.Run("Conformance", func(t *testing.T) { conformance(t, sa, func(*testing.T) string { return ns }) })
	driverSuiteIn(t, sa, ns)
}

// applyRBAC creates the ServiceAccount, Role and RoleBinding that deploy/base
// renders, in ns.
func applyRBAC(t *testing.T, ns string) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	ctx := context.Background()
	out, err := manifests.Render(ctx, filepath.Join(filepath.Dir(file), "..", "..", "deploy", "base"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := manifests.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			o.Namespace = ns
			_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			o.Namespace = ns
			// Pods, and get on secrets alone: the secret refs of session configs
			// (SPEC §12.2) are read one by one, never listed or watched.
			if len(o.Rules) != 2 || strings.Join(o.Rules[0].Resources, ",") != "pods" ||
				strings.Join(o.Rules[1].Resources, ",") != "secrets" || strings.Join(o.Rules[1].Verbs, ",") != "get" {
				t.Errorf("role rules %+v: want pods, and get on secrets", o.Rules)
			}
			_, err = admin.RbacV1().Roles(ns).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			o.Namespace = ns
			for i := range o.Subjects {
				o.Subjects[i].Namespace = ns
			}
			_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			continue // the rest of the deployment
		}
		if err != nil {
			t.Fatal(err)
		}
		kinds[fmt.Sprintf("%T", obj)] = true
	}
	if len(kinds) != 3 {
		t.Fatalf("deploy/base renders RBAC objects %v, want a ServiceAccount, a Role and a RoleBinding", kinds)
	}
}

// driverSuiteIn runs the Kubernetes-specific driver tests with cs in ns, one after
// another; each removes its pods when it ends.
func driverSuiteIn(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Run("PodObject", func(t *testing.T) { testPodObject(t, cs, ns) })
	t.Run("ImagePullFails", func(t *testing.T) { testImagePull(t, cs, ns) })
	t.Run("DeletedBehindOurBack", func(t *testing.T) { testDeletedBehindBack(t, cs, ns) })
	t.Run("SlowReady", func(t *testing.T) { testSlowReady(t, cs, ns) })
	t.Run("NameClash", func(t *testing.T) { testNameClash(t, cs, ns) })
}

// conformance runs the PodDriver contract suite on the driver with cs, each check in
// the namespace namespace gives it: the test plays a kubelet whose pod fails (Kill), a
// node selector no node matches fails deploys, kwok's hold knob stalls them.
func conformance(t *testing.T, cs kubernetes.Interface, namespace func(*testing.T) string) {
	drivertest.Run(t, func(t *testing.T, mode drivertest.Mode) *drivertest.Harness {
		ns := namespace(t)
		d := mustDriver(t, cs, ns, func(c *k8s.Config) {
			switch mode {
			case drivertest.Failing:
				c.NodeSelector = map[string]string{"warmpool.io/no-such-pool": "x"}
			case drivertest.Stalled:
				c.PodAnnotations = map[string]string{holdAnnotation: "stalled"}
			}
		})
		return &drivertest.Harness{
			Driver:     d,
			FailReason: "unschedulable",
			ServesHTTP: true,
			Settle:     30 * time.Second,
			Kill: func(t *testing.T, pod warmpool.Pod) {
				err := setPodStatus(ns, pod.ID, func(st *corev1.PodStatus) {
					st.Phase = corev1.PodFailed
					st.ContainerStatuses = []corev1.ContainerStatus{{Name: warmpool.DefaultContainerName,
						State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}}}}
				})
				if err != nil {
					t.Fatalf("fail pod %s: %v", pod.ID, err)
				}
			},
			Serving: func(t *testing.T, pod warmpool.Pod) { awaitServed(t, mustGetPod(t, ns, pod.ID)) },
			Labels:  func(t *testing.T, pod warmpool.Pod) map[string]string { return mustGetPod(t, ns, pod.ID).Labels },
		}
	})
}

// mustGetPod reads pod ns/name from the API server.
func mustGetPod(t *testing.T, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := admin.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// testSlowReady: kwok delays Ready by 2s (stage knob); Deploy waits for it through its
// watch and returns only then.
func testSlowReady(t *testing.T, cs kubernetes.Interface, ns string) {
	d := mustDriver(t, cs, ns, func(c *k8s.Config) {
		c.PodAnnotations = map[string]string{"pod-ready.stage.kwok.x-k8s.io/delay": "2s"}
	})
	start := time.Now()
	pod, err := d.Deploy(context.Background(), deployReq("e2e-slow", 1, 30))
	took := time.Since(start)
	t.Logf("slow pod ready after %s", took.Round(time.Millisecond))
	if err != nil || !pod.Ready {
		t.Fatalf("pod %+v err %v", pod, err)
	}
	if took < 2*time.Second || took > 10*time.Second {
		t.Errorf("took %s, want about 2s", took)
	}
	if err := d.Delete(context.Background(), pod); err != nil {
		t.Error(err)
	}
	waitGone(t, ns, pod.ID, 20*time.Second)
}

// testNameClash: two deploys of the same fence make one pod (the second create meets
// AlreadyExists with its own labels and waits for that pod); a foreign pod holding the
// name makes the driver take a fresh one and leave the foreign pod alone.
func testNameClash(t *testing.T, cs kubernetes.Interface, ns string) {
	d := mustDriver(t, cs, ns, nil)
	ctx := context.Background()
	req := deployReq("e2e-dup", 5, 30)
	var wg sync.WaitGroup
	got := make([]warmpool.Pod, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() { got[i], errs[i] = d.Deploy(ctx, req) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || got[0].ID != got[1].ID || got[0].ID != warmpool.PodName(req.ScopeID, 5) {
		t.Fatalf("duplicate deploys: %+v %v / %+v %v", got[0], errs[0], got[1], errs[1])
	}
	l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: warmpool.LabelScope + "=e2e-dup"})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("%d pods for one fence (%v)", len(l.Items), err)
	}

	// A foreign pod (another fence's labels) holds the next fence's name.
	foreign := l.Items[0].DeepCopy()
	foreign.ObjectMeta = metav1.ObjectMeta{Name: warmpool.PodName(req.ScopeID, 6), Namespace: ns,
		Labels: map[string]string{"app": "someone-else"}}
	foreign.Status = corev1.PodStatus{}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	req.Fence = 6
	pod, err := d.Deploy(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pod.ID, foreign.Name+"-") || pod.Fence != 6 {
		t.Errorf("pod %+v, want a fresh name after %s", pod, foreign.Name)
	}
	if _, err := admin.CoreV1().Pods(ns).Get(ctx, foreign.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("foreign pod: %v", err)
	}
	for _, p := range []warmpool.Pod{got[0], pod, {ID: foreign.Name, Namespace: ns}} {
		if err := d.Delete(ctx, p); err != nil {
			t.Error(err)
		}
	}
}

// testPodObject: a deploy reports its phases, and the API server holds the pod as the
// driver built it: annotations, resources, no service account token, a locked-down
// container with a readiness probe. (The contract itself is the conformance suite's.)
func testPodObject(t *testing.T, cs kubernetes.Interface, ns string) {
	var mu sync.Mutex
	phases := map[k8s.DeployPhase]time.Duration{}
	d := mustDriver(t, cs, ns, func(c *k8s.Config) {
		c.OnPhase = func(ev k8s.PhaseEvent) { mu.Lock(); phases[ev.Phase] = ev.Elapsed; mu.Unlock() }
	})
	ctx := context.Background()
	req := deployReq("e2e_life.agent", 42, 60)
	start := time.Now()
	pod, err := d.Deploy(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("deploy ready in %s (created %s, scheduled %s, started %s, ready %s)", time.Since(start).Round(time.Millisecond),
		phases[k8s.PhaseCreated].Round(time.Millisecond), phases[k8s.PhaseScheduled].Round(time.Millisecond),
		phases[k8s.PhaseStarted].Round(time.Millisecond), phases[k8s.PhaseReady].Round(time.Millisecond))
	if len(phases) != 4 || phases[k8s.PhaseStarted] > phases[k8s.PhaseReady] {
		t.Errorf("phases %v, want created, scheduled, started and ready, started no later than ready", phases)
	}
	mu.Unlock()
	if pod.Namespace != ns || !strings.HasPrefix(pod.SSEURL, "http://127.1.") || !strings.HasSuffix(pod.SSEURL, ":8080/sse") {
		t.Errorf("pod %+v, want it in %s at a kwok pod IP, port 8080", pod, ns)
	}

	kp := mustGetPod(t, ns, pod.ID)
	if kp.Annotations[podpolicy.AnnotationScopeID] != req.ScopeID || kp.Annotations[podpolicy.AnnotationPort] != "8080" || kp.Annotations[podpolicy.AnnotationSSEPath] != "/sse" {
		t.Errorf("annotations %v", kp.Annotations)
	}
	c := kp.Spec.Containers[0]
	if q := c.Resources.Requests[corev1.ResourceMemory]; q.Cmp(resource.MustParse(warmpool.DefaultMemory)) != 0 {
		t.Errorf("memory request %s", q.String())
	}
	if q := c.Resources.Limits[corev1.ResourceMemory]; q.Cmp(resource.MustParse(warmpool.DefaultMemory)) != 0 {
		t.Errorf("memory limit %s", q.String())
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse(warmpool.DefaultCPU)) != 0 {
		t.Errorf("cpu request %s", q.String())
	}
	if kp.Spec.AutomountServiceAccountToken == nil || *kp.Spec.AutomountServiceAccountToken ||
		c.SecurityContext == nil || *c.SecurityContext.AllowPrivilegeEscalation || c.ReadinessProbe.HTTPGet.Path != "/health" {
		t.Errorf("pod spec %+v", kp.Spec)
	}
	if err := d.Delete(ctx, pod); err != nil {
		t.Error(err)
	}
	waitGone(t, ns, pod.ID, 20*time.Second)
}

// testImagePull: kwok is told to hold the pod; the test plays a kubelet that cannot pull
// the image; the deploy fails within seconds, not ready_timeout, and the pod is deleted.
func testImagePull(t *testing.T, cs kubernetes.Interface, ns string) {
	d := mustDriver(t, cs, ns, func(c *k8s.Config) { c.PodAnnotations = map[string]string{holdAnnotation: "image-pull"} })
	req := deployReq("e2e-pull", 1, 120)
	req.Spec.Image = "registry.invalid/never/pulls:1"
	name := warmpool.PodName(req.ScopeID, 1)
	kubeletDone := make(chan struct{})
	defer func() { <-kubeletDone }()
	go func() { // the failing kubelet
		defer close(kubeletDone)
		p, err := waitPod(ns, 30*time.Second, func(p *corev1.Pod) bool { return p.Name == name && p.Spec.NodeName != "" })
		if err != nil {
			t.Error(err)
			return
		}
		if err := failImagePull(ns, p.Name, req.Spec.ContainerName, req.Spec.Image); err != nil {
			t.Errorf("status update: %v", err)
		}
	}()
	start := time.Now()
	_, err := d.Deploy(context.Background(), req)
	took := time.Since(start)
	t.Logf("image pull failure detected in %s: %v", took.Round(time.Millisecond), err)
	if warmpool.ErrorCode(err) != warmpool.CodeDeployFailed || !strings.Contains(err.Error(), "ErrImagePull") {
		t.Fatalf("err %v", err)
	}
	if took > 10*time.Second {
		t.Errorf("took %s", took)
	}
	waitGone(t, ns, name, 20*time.Second)
}

// podEvents collects the driver's OnPod stream.
type podEvents struct {
	mu   sync.Mutex
	seen []warmpool.Pod
	ch   chan struct{}
}

func (e *podEvents) add(p warmpool.Pod) {
	e.mu.Lock()
	e.seen = append(e.seen, p)
	old := e.ch
	e.ch = make(chan struct{})
	e.mu.Unlock()
	if old != nil {
		close(old)
	}
}

// await waits until an event satisfies ok.
func (e *podEvents) await(t *testing.T, within time.Duration, ok func(warmpool.Pod) bool) warmpool.Pod {
	t.Helper()
	deadline := time.After(within)
	for {
		e.mu.Lock()
		for _, p := range e.seen {
			if ok(p) {
				e.mu.Unlock()
				return p
			}
		}
		if e.ch == nil {
			e.ch = make(chan struct{})
		}
		ch := e.ch
		e.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no matching pod event within %s", within)
		}
	}
}

// testDeletedBehindBack: a pod deleted by someone else is reported dead by the informer
// feed and drops out of List.
func testDeletedBehindBack(t *testing.T, cs kubernetes.Interface, ns string) {
	ev := &podEvents{}
	d := mustDriver(t, cs, ns, func(c *k8s.Config) { c.OnPod = ev.add })
	ctx := context.Background()
	pod, err := d.Deploy(ctx, deployReq("e2e-gone", 1, 60))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := admin.CoreV1().Pods(ns).Delete(ctx, pod.ID, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	dead := ev.await(t, 10*time.Second, func(p warmpool.Pod) bool { return p.ID == pod.ID && p.Dead != "" })
	t.Logf("death seen in %s: %s", time.Since(start).Round(time.Millisecond), dead.Dead)
	if !strings.HasPrefix(dead.Dead, k8s.DeathDeleted) {
		t.Errorf("dead %q", dead.Dead)
	}
	waitGone(t, ns, pod.ID, 20*time.Second)
	ev.await(t, 10*time.Second, func(p warmpool.Pod) bool { return p.ID == pod.ID && p.Dead == k8s.DeathDeleted+": pod is gone" })
	pods, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.ID == pod.ID {
			t.Errorf("deleted pod still listed: %+v", p)
		}
	}
}

// testNodeDeleted: the pod's node is deleted (admin only: the pods-only Role cannot read
// nodes) and List reports the pod dead with node-lost.
func testNodeDeleted(t *testing.T, cs kubernetes.Interface, ns string) {
	ctx := context.Background()
	node := "e2e-node-" + strconv.Itoa(rand.IntN(1e6))
	_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        node,
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": node, "e2e-node": node},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	ev := &podEvents{}
	d := mustDriver(t, cs, ns, func(c *k8s.Config) {
		c.NodeSelector = map[string]string{"e2e-node": node}
		c.UnschedulableGrace = 20 * time.Second // the new node may need a moment to turn Ready
		c.OnPod = ev.add
	})
	pod, err := d.Deploy(ctx, deployReq("e2e-node", 1, 60))
	if err != nil {
		t.Fatal(err)
	}
	pods, err := d.List(ctx)
	if err != nil || len(pods) != 1 || pods[0].Dead != "" {
		t.Fatalf("before: %+v %v", pods, err)
	}
	start := time.Now()
	if err := admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node informer sees the deletion and re-judges the node's pods (OnPod); List
	// judges them the same way from the caches.
	dead := ev.await(t, 15*time.Second, func(p warmpool.Pod) bool { return p.ID == pod.ID && p.Dead != "" })
	t.Logf("node loss seen in %s: %s", time.Since(start).Round(time.Millisecond), dead.Dead)
	if !strings.HasPrefix(dead.Dead, k8s.DeathNodeLost) {
		t.Fatalf("dead %q, want node-lost", dead.Dead)
	}
	pods, err = d.List(ctx)
	if err != nil || len(pods) != 1 || !strings.HasPrefix(pods[0].Dead, k8s.DeathNodeLost) || pods[0].Ready {
		t.Errorf("List after node loss: %+v %v", pods, err)
	}
	if err := d.Delete(ctx, pod); err != nil {
		t.Error(err)
	}
}
