//go:build e2e_k8s

package k8s_e2e

// Route-level tests: a whole warmpool replica (server.New) on a real redis-server
// (REDIS_ADDR, set by scripts/with-redis.sh) and the real kube-apiserver of the rig, driven
// through its HTTP API and, where a deterministic step helps, by running its sweeper jobs
// by hand. The kubelet shim of driver_test.go makes the pods' health and SSE endpoints
// real.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/retry"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/drivertest"
	"github.com/warmpool/warmpool/internal/testing/syncbuf"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/k8s"
	"github.com/warmpool/warmpool/podpolicy"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sm"
	"github.com/warmpool/warmpool/sqlite"
	"github.com/warmpool/warmpool/sweeper"
)

// Sweeper timing of every test replica: short graces so that the ghost and orphan paths
// are reached within seconds.
const (
	sweepInterval = 200 * time.Millisecond
	ghostGrace    = 2 * time.Second
	orphanGrace   = 3 * time.Second
)

// ---------- the suites ----------

func TestServiceAdmin(t *testing.T) {
	serviceSuite(t, admin, nil)
	t.Run("NodeDeleted", func(t *testing.T) { testServiceNodeLost(t, admin, mustNamespace(t), false) })
	t.Run("NodeNotReady", func(t *testing.T) { testServiceNodeLost(t, admin, mustNamespace(t), true) })
}

// TestServiceLeastPrivilege runs the route-level suite with the replica's driver on a
// token of the ServiceAccount deploy/base binds to its Role (pods, get on secrets; the test
// itself plays kubelet and operator as admin). Node loss needs a node watch, which that
// Role does not grant, so it runs as admin only.
func TestServiceLeastPrivilege(t *testing.T) {
	ns := mustNamespace(t)
	sa := saClient(t, ns)
	serviceSuite(t, sa, func(*testing.T) string { return ns })
}

// serviceSuite runs the route-level tests with cs; namespace gives each test its
// namespace (nil: a fresh one per test). Tests in one namespace run one after another
// and each removes its pods when it ends.
func serviceSuite(t *testing.T, cs kubernetes.Interface, namespace func(*testing.T) string) {
	if namespace == nil {
		namespace = mustNamespace
	}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T, kubernetes.Interface, string)
	}{
		{"FullPath", testServiceFullPath},
		{"ColdBurst", testServiceColdBurst},
		{"ImagePullFails", testServiceImagePull},
		{"Unschedulable", testServiceUnschedulable},
		{"PodDeleted", testServicePodDeleted},
		{"Reconcile", testServiceReconcile},
		{"RedisLost", testServiceRedisLost},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, cs, namespace(t)) })
	}
}

// saToken is a token of deploy/base's ServiceAccount, applied in ns.
func saToken(t *testing.T, ns string) string {
	t.Helper()
	applyRBAC(t, ns)
	tok, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), "warmpool",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// saKubeconfig is a kubeconfig file for the rig with a token of deploy/base's
// ServiceAccount, applied in ns: warmpool serve with the Role it is deployed with.
func saKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	ca := adminCfg.CAData
	if len(ca) == 0 && adminCfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(adminCfg.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["rig"] = &clientcmdapi.Cluster{Server: adminCfg.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["warmpool"] = &clientcmdapi.AuthInfo{Token: saToken(t, ns)}
	cfg.Contexts["warmpool"] = &clientcmdapi.Context{Cluster: "rig", AuthInfo: "warmpool", Namespace: ns}
	cfg.CurrentContext = "warmpool"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// saClient is a client with a token of deploy/base's ServiceAccount, applied in ns.
func saClient(t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(adminCfg)
	cfg.BearerToken = saToken(t, ns)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the ServiceAccount lists nodes (%v): the Role is wider than pods", err)
	}
	return cs
}

// ---------- a replica under test ----------

type service struct {
	t      *testing.T
	redis  *testredis.Redis
	srv    *server.Server
	base   string // http://host:port of the replica
	ns     string
	driver *k8s.Kubernetes
	client *http.Client
	log    *syncbuf.Buffer // the stderr of a `warmpool serve` process (startServe); nil in process
}

type serviceOpts struct {
	// driver tunes the replica's kubernetes driver.
	driver func(*k8s.Config)
	// jobs runs the background jobs (srv.Runner) as `warmpool serve` does; without it
	// the test runs the jobs it needs itself.
	jobs bool
}

// mustService builds a complete replica: the kubernetes driver on cs in ns, a real
// redis-server (own key prefix), an in-memory SQLite config store and short sweep
// intervals, served by httptest. Everything stops with the test, and the managed pods
// left in ns are deleted.
func mustService(t *testing.T, cs kubernetes.Interface, ns string, o serviceOpts) *service {
	t.Helper()
	if !testredis.Real() {
		t.Fatal("REDIS_ADDR is not set: the route-level tests need a real redis-server (make e2e-k8s starts one with scripts/with-redis.sh)")
	}
	ctx := context.Background()
	t.Cleanup(func() { deleteManagedPods(t, ns) }) // runs last
	r := testredis.New(t)
	st, err := sqlite.Open(ctx, ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	d := mustDriver(t, cs, ns, o.driver)
	srv, err := server.New(ctx, server.Config{
		Redis:      r.Client,
		Prefix:     r.Prefix,
		Driver:     d,
		Store:      st,
		InstanceID: "e2e-" + strconv.Itoa(rand.IntN(1e6)),
		Logger:     slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Sweep:      sweeper.Config{Interval: sweepInterval, GhostGrace: ghostGrace, OrphanGrace: orphanGrace},
		SM:         sm.Config{Recheck: 50 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	if o.jobs {
		jctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() { srv.Runner.Run(jctx) })
		wg.Go(func() { _ = srv.Sweeper.Follow(jctx) }) // it ends when jctx does
		t.Cleanup(func() { stop(); wg.Wait() })
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return &service{t: t, redis: r, srv: srv, base: ts.URL, ns: ns, driver: d, client: &http.Client{Timeout: 60 * time.Second}}
}

// deleteManagedPods removes every managed pod of ns at once (grace 0), so a namespace
// shared by several tests starts clean and the fake node does not fill up.
func deleteManagedPods(t *testing.T, ns string) {
	zero := int64(0)
	err := admin.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: warmpool.LabelManagedBy + "=" + warmpool.ManagedByValue})
	if err != nil {
		t.Errorf("cleanup: delete pods of %s: %v", ns, err)
	}
}

// reply is one HTTP answer.
type reply struct {
	what   string
	status int
	body   []byte
	took   time.Duration
	err    error
}

func (r reply) String() string {
	if r.err != nil {
		return fmt.Sprintf("%s: %v", r.what, r.err)
	}
	return fmt.Sprintf("%s -> %d %s (%s)", r.what, r.status, bytes.TrimSpace(r.body), r.took.Round(time.Millisecond))
}

// errCode is the code of an error envelope ("" when the body is none).
func (r reply) errCode() string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// call sends one request; safe from any goroutine (it never fails the test).
func (s *service) call(method, path, body string) reply {
	r := reply{what: method + " " + path}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, s.base+path, rd)
	if err != nil {
		r.err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	res, err := s.client.Do(req)
	r.took = time.Since(start)
	if err != nil {
		r.err = err
		return r
	}
	defer res.Body.Close()
	r.status = res.StatusCode
	r.body, r.err = io.ReadAll(res.Body)
	return r
}

// must sends one request and decodes its 200 answer into v.
func (s *service) must(method, path, body string, v any) reply {
	s.t.Helper()
	r := s.call(method, path, body)
	if r.err != nil || r.status != http.StatusOK {
		s.t.Fatalf("%v", r)
	}
	if v != nil {
		if err := json.Unmarshal(r.body, v); err != nil {
			s.t.Fatalf("%v: %v", r, err)
		}
	}
	return r
}

// putConfig stores a scope config and returns its deploy_ver.
func (s *service) putConfig(scope, doc string) string {
	s.t.Helper()
	var out struct {
		DeployVer string `json:"deploy_ver"`
	}
	s.must(http.MethodPut, "/v1/scopes/"+scope+"/config", doc, &out)
	if out.DeployVer == "" {
		s.t.Fatalf("PUT config of %s: no deploy_ver", scope)
	}
	return out.DeployVer
}

func (s *service) route(scope, session string) reply {
	return s.call(http.MethodPost, "/v1/scopes/"+scope+"/sessions", fmt.Sprintf(`{"session_id":%q}`, session))
}

func (s *service) mustRoute(scope, session string) warmpool.Binding {
	s.t.Helper()
	var b warmpool.Binding
	r := s.must(http.MethodPost, "/v1/scopes/"+scope+"/sessions", fmt.Sprintf(`{"session_id":%q}`, session), &b)
	if b.PodID == "" || b.SSEURL == "" || b.SessionID != session {
		s.t.Fatalf("route: %v", r)
	}
	return b
}

func (s *service) touch(scope, session string) bool {
	s.t.Helper()
	var out struct {
		Touched *bool `json:"touched"`
	}
	r := s.must(http.MethodPost, "/v1/scopes/"+scope+"/sessions/"+session+"/touch", "", &out)
	if out.Touched == nil {
		s.t.Fatalf("touch: %v", r)
	}
	return *out.Touched
}

func (s *service) end(scope, session string) bool {
	s.t.Helper()
	var out struct {
		Released *bool `json:"released"`
	}
	r := s.must(http.MethodDelete, "/v1/scopes/"+scope+"/sessions/"+session, "", &out)
	if out.Released == nil {
		s.t.Fatalf("end: %v", r)
	}
	return *out.Released
}

// poolView is GET /v1/scopes/{scope}/pool.
type poolView struct {
	DeployVer    string    `json:"deploy_ver"`
	MaxPods      int       `json:"max_pods"`
	Pods         []poolPod `json:"pods"`
	Placeholders int       `json:"placeholders"`
	Followers    int       `json:"followers"`
	Waiters      int       `json:"waiters"`
	raw          []byte    // the answer as sent, for messages
}

type poolPod struct {
	PodID     string     `json:"pod_id"`
	State     string     `json:"state"`
	Sessions  int        `json:"sessions"`
	DeployVer string     `json:"deploy_ver"`
	SSEURL    string     `json:"pod_sse_url"`
	IdleSince *time.Time `json:"idle_since"`
}

func (p poolView) String() string { return string(bytes.TrimSpace(p.raw)) }

func (p poolView) pod(id string) *poolPod {
	for i := range p.Pods {
		if p.Pods[i].PodID == id {
			return &p.Pods[i]
		}
	}
	return nil
}

func (p poolView) ids() []string {
	out := make([]string, 0, len(p.Pods))
	for _, pp := range p.Pods {
		out = append(out, pp.PodID)
	}
	sort.Strings(out)
	return out
}

// clean reports whether nothing of a deploy or a wait is left: no placeholder, no
// follower, no waiter.
func (p poolView) clean() bool { return p.Placeholders == 0 && p.Followers == 0 && p.Waiters == 0 }

func (s *service) pool(scope string) poolView {
	s.t.Helper()
	var p poolView
	r := s.must(http.MethodGet, "/v1/scopes/"+scope+"/pool", "", &p)
	p.raw = r.body
	return p
}

// job runs one sweeper job now, as the Runner would, and fails the test on its error.
func (s *service) job(name string, run func(context.Context) error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		s.t.Fatalf("%s: %v", name, err)
	}
}

// listed reports whether the replica's driver lists the pod (from its informer cache).
func (s *service) listed(id string) bool {
	s.t.Helper()
	pods, err := s.driver.List(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return slices.ContainsFunc(pods, func(p warmpool.Pod) bool { return p.ID == id })
}

// cacheReady reports whether the replica's driver lists every pod of ids as Ready: its
// informer cache may lag a few milliseconds behind the deploy's own watch.
func (s *service) cacheReady(ids ...string) (bool, string) {
	s.t.Helper()
	pods, err := s.driver.List(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	ready := map[string]bool{}
	for _, p := range pods {
		ready[p.ID] = p.Ready && p.Dead == "" && p.SSEURL != ""
	}
	for _, id := range ids {
		if !ready[id] {
			return false, fmt.Sprintf("listed %v", pods)
		}
	}
	return true, ""
}

// eventually polls cond until it holds, at most within; state describes what was seen
// last, for the failure message. It returns how long it took.
func eventually(t *testing.T, within time.Duration, what string, cond func() (ok bool, state string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s; last seen: %s", what, within, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ---------- what the API server holds ----------

// scopePods lists the pods of a scope in ns (terminating ones included).
func scopePods(t *testing.T, ns, scope string) []corev1.Pod {
	t.Helper()
	l, err := admin.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: warmpool.LabelScope + "=" + podpolicy.ScopeLabelValue(scope)})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// liveNames are the names of the pods that are not being deleted.
func liveNames(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	sort.Strings(out)
	return out
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// awaitServed waits until the kubelet shim serves the pod's port.
func awaitServed(t *testing.T, p *corev1.Pod) {
	t.Helper()
	select {
	case <-shim.servingCh(net.JoinHostPort(p.Status.PodIP, p.Annotations[podpolicy.AnnotationPort]), string(p.UID)):
	case <-time.After(10 * time.Second):
		t.Fatalf("kubelet shim never served pod %s", p.Name)
	}
}

// checkSSE reads the first event of a routed session's SSE URL: the pod's own stream.
func checkSSE(t *testing.T, ns string, b warmpool.Binding) {
	t.Helper()
	kp := mustGetPod(t, ns, b.PodID)
	awaitServed(t, kp)
	if want := "http://" + net.JoinHostPort(kp.Status.PodIP, "8080") + "/sse"; b.SSEURL != want {
		t.Errorf("pod_sse_url %s, want %s", b.SSEURL, want)
	}
	if ev := drivertest.FirstEvent(t, b.SSEURL); !strings.Contains(ev, "event: hello") || !strings.Contains(ev, b.PodID) {
		t.Errorf("SSE event of %s: %q", b.PodID, ev)
	}
}

// ---------- 1. the full path ----------

// testServiceFullPath: PUT config → route → a labelled pod with the default resources in
// the API server → Ready → SSE reachable → end → idle in /pool → reclaim after pod_ttl_s
// deletes it in the API server.
func testServiceFullPath(t *testing.T, cs kubernetes.Interface, ns string) {
	s := mustService(t, cs, ns, serviceOpts{})
	const scope = "e2e-full.agent"
	ver := s.putConfig(scope, `{"deploy":{"ready_timeout_s":30,"env":{"K":"V"}},
		"pool":{"max_concurrency":4,"pod_concurrency":2,"pod_ttl_s":1}}`)

	// The missing memory request was stored as the one default.
	var stored struct {
		Config warmpool.ScopeConfig `json:"config"`
	}
	s.must(http.MethodGet, "/v1/scopes/"+scope+"/config", "", &stored)
	if stored.Config.Deploy.Resources.Memory != warmpool.DefaultMemory {
		t.Errorf("stored memory %q, want %q", stored.Config.Deploy.Resources.Memory, warmpool.DefaultMemory)
	}

	start := time.Now()
	b := s.mustRoute(scope, "s1")
	t.Logf("cold route answered in %s: %s", time.Since(start).Round(time.Millisecond), b.PodID)
	if !b.New || b.DeployVer != ver || b.ScopeID != scope {
		t.Errorf("warmpool.Binding %+v", b)
	}

	// The pod in the API server.
	kp := mustGetPod(t, ns, b.PodID)
	fence, err := strconv.ParseInt(kp.Labels[warmpool.LabelFence], 10, 64)
	if err != nil || fence < 1 || b.PodID != warmpool.PodName(scope, fence) {
		t.Errorf("pod %s with fence label %q", b.PodID, kp.Labels[warmpool.LabelFence])
	}
	for k, v := range map[string]string{
		warmpool.LabelManagedBy: warmpool.ManagedByValue, warmpool.LabelScope: scope, warmpool.LabelDeployVer: ver,
	} {
		if kp.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, kp.Labels[k], v)
		}
	}
	if kp.Annotations[podpolicy.AnnotationScopeID] != scope || kp.Annotations[podpolicy.AnnotationDeployVer] != ver {
		t.Errorf("annotations %v", kp.Annotations)
	}
	c := kp.Spec.Containers[0]
	mem := resource.MustParse(warmpool.DefaultMemory)
	if q := c.Resources.Requests[corev1.ResourceMemory]; q.Cmp(mem) != 0 {
		t.Errorf("memory request %s, want %s", q.String(), warmpool.DefaultMemory)
	}
	if q := c.Resources.Limits[corev1.ResourceMemory]; q.Cmp(mem) != 0 {
		t.Errorf("memory limit %s, want %s", q.String(), warmpool.DefaultMemory)
	}
	if q := c.Resources.Requests[corev1.ResourceCPU]; q.Cmp(resource.MustParse(warmpool.DefaultCPU)) != 0 {
		t.Errorf("cpu request %s", q.String())
	}
	if len(c.Env) != 1 || c.Env[0].Name != "K" || c.Env[0].Value != "V" {
		t.Errorf("env %v", c.Env)
	}
	if !podReady(kp) {
		t.Errorf("routed to a pod that is not Ready: %+v", kp.Status)
	}
	checkSSE(t, ns, b)

	// Sticky, first fit, /pool.
	if again := s.mustRoute(scope, "s1"); again.New || again.PodID != b.PodID {
		t.Errorf("second route of s1: %+v", again)
	}
	if b2 := s.mustRoute(scope, "s2"); !b2.New || b2.PodID != b.PodID {
		t.Errorf("s2 did not share the pod (pod_concurrency 2): %+v", b2)
	}
	var got warmpool.Binding
	s.must(http.MethodGet, "/v1/scopes/"+scope+"/sessions/s1", "", &got)
	if got.PodID != b.PodID {
		t.Errorf("GET session: %+v", got)
	}
	p := s.pool(scope)
	if pp := p.pod(b.PodID); len(p.Pods) != 1 || pp == nil || pp.State != "busy" || pp.Sessions != 2 || !p.clean() || p.DeployVer != ver || p.MaxPods != 2 {
		t.Errorf("pool while busy: %v", p)
	}
	if len(scopePods(t, ns, scope)) != 1 {
		t.Errorf("pods in the API server: %v", liveNames(scopePods(t, ns, scope)))
	}

	// End → idle.
	if !s.end(scope, "s1") || !s.end(scope, "s2") {
		t.Error("end: not released")
	}
	if s.end(scope, "s1") {
		t.Error("a second end released again")
	}
	p = s.pool(scope)
	pp := p.pod(b.PodID)
	if len(p.Pods) != 1 || pp == nil || pp.State != "idle" || pp.Sessions != 0 || pp.IdleSince == nil {
		t.Fatalf("pool after end: %v", p)
	}
	if s.touch(scope, "s1") {
		t.Error("touch of an ended session: touched")
	}

	// Reclaim: not before pod_ttl_s, then the pod goes from Redis and the API server.
	s.job("reclaim", s.srv.Sweeper.Reclaim)
	if time.Since(*pp.IdleSince) < 900*time.Millisecond && s.pool(scope).pod(b.PodID) == nil {
		t.Error("reclaimed before pod_ttl_s")
	}
	eventually(t, 10*time.Second, "reclaim of the idle pod", func() (bool, string) {
		s.job("reclaim", s.srv.Sweeper.Reclaim)
		p := s.pool(scope)
		return len(p.Pods) == 0, p.String()
	})
	t.Logf("reclaimed %s after %s idle (pod_ttl_s 1)", b.PodID, time.Since(*pp.IdleSince).Round(10*time.Millisecond))
	waitGone(t, ns, b.PodID, 20*time.Second)
}

// ---------- 2. the cold burst ----------

// testServiceColdBurst: N concurrent cold routes make exactly ceil(N/pc) pods in the API
// server, side by side, and every route answers 200.
func testServiceColdBurst(t *testing.T, cs kubernetes.Interface, ns string) {
	s := mustService(t, cs, ns, serviceOpts{})
	const scope, n, pc = "e2e-burst", 6, 2
	s.putConfig(scope, fmt.Sprintf(`{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":%d,"pod_concurrency":%d}}`, n, pc))

	// Every pod the API server ever holds for the scope, from a watch started first.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := admin.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: warmpool.LabelScope + "=" + scope})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		created = map[string]bool{}
		watched = make(chan struct{})
	)
	go func() {
		defer close(watched)
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				created[p.Name] = true
				mu.Unlock()
			}
		}
	}()

	start := time.Now()
	replies := make([]reply, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { replies[i] = s.route(scope, fmt.Sprintf("burst-%d", i)) })
	}
	wg.Wait()
	t.Logf("%d cold routes answered in %s", n, time.Since(start).Round(time.Millisecond))
	perPod := map[string]int{}
	for _, r := range replies {
		var b warmpool.Binding
		if r.err != nil || r.status != http.StatusOK || json.Unmarshal(r.body, &b) != nil || !b.New {
			t.Errorf("route: %v", r)
			continue
		}
		perPod[b.PodID]++
	}
	want := (n + pc - 1) / pc
	if len(perPod) != want {
		t.Errorf("sessions per pod %v: want %d pods", perPod, want)
	}
	for id, k := range perPod {
		if k != pc {
			t.Errorf("pod %s holds %d sessions, want %d", id, k, pc)
		}
	}
	p := s.pool(scope)
	if len(p.Pods) != want || !p.clean() {
		t.Errorf("pool: %v", p)
	}
	for _, pp := range p.Pods {
		if pp.State != "busy" || pp.Sessions != pc {
			t.Errorf("pool pod %+v", pp)
		}
	}
	// Exactly ceil(N/pc) pods were ever created: no second pod from a lost race, and
	// nothing created and deleted again.
	eventually(t, 5*time.Second, "the watch sees every routed pod", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for id := range perPod {
			if !created[id] {
				return false, fmt.Sprint(created)
			}
		}
		return true, ""
	})
	cancel()
	<-watched
	if len(created) != want {
		t.Errorf("pods created in the API server: %v, want %d", slices.Sorted(maps.Keys(created)), want)
	}
	if live := liveNames(scopePods(t, ns, scope)); len(live) != want {
		t.Errorf("pods in the API server: %v", live)
	}
}

// ---------- 3. early failures ----------

// testServiceImagePull: an image that never pulls fails the leader and its follower with
// 502 DEPLOY_FAILED within seconds of the kubelet's verdict, not after ready_timeout_s;
// placeholder and follower entry are gone and so is the pod.
func testServiceImagePull(t *testing.T, cs kubernetes.Interface, ns string) {
	s := mustService(t, cs, ns, serviceOpts{driver: func(c *k8s.Config) {
		c.PodAnnotations = map[string]string{holdAnnotation: "image-pull"} // kwok leaves the kubelet to the test
	}})
	const scope, image = "e2e-pull", "registry.invalid/never/pulls:1"
	s.putConfig(scope, `{"deploy":{"image":"`+image+`","ready_timeout_s":120},"pool":{"max_concurrency":4,"pod_concurrency":2}}`)

	start := time.Now()
	leader, follower := make(chan reply, 1), make(chan reply, 1)
	go func() { leader <- s.route(scope, "pull-1") }()
	kp, err := waitPod(ns, 30*time.Second, func(p *corev1.Pod) bool {
		return p.Labels[warmpool.LabelScope] == scope && p.Spec.NodeName != ""
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { follower <- s.route(scope, "pull-2") }()
	eventually(t, 10*time.Second, "the second route follows the deploy in flight", func() (bool, string) {
		p := s.pool(scope)
		return p.Followers == 1 && p.Placeholders == 1, p.String()
	})
	verdict := time.Now()
	if err := failImagePull(ns, kp.Name, warmpool.DefaultContainerName, image); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []chan reply{leader, follower} {
		var r reply
		select {
		case r = <-ch:
		case <-time.After(30 * time.Second):
			t.Fatal("route still waiting 30s after the image pull failed")
		}
		if r.status != http.StatusBadGateway || r.errCode() != string(warmpool.CodeDeployFailed) || !strings.Contains(string(r.body), "ErrImagePull") {
			t.Errorf("route: %v, want 502 DEPLOY_FAILED naming ErrImagePull", r)
		}
	}
	t.Logf("both routes failed %s after the kubelet's verdict (%s after the first route)",
		time.Since(verdict).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if time.Since(verdict) > 10*time.Second {
		t.Errorf("DEPLOY_FAILED took %s after ErrImagePull", time.Since(verdict))
	}
	if p := s.pool(scope); len(p.Pods) != 0 || !p.clean() {
		t.Errorf("pool after the failed deploy: %v", p)
	}
	waitGone(t, ns, kp.Name, 20*time.Second)
}

// testServiceUnschedulable: a pod no node can take (the driver's node selector) fails
// both routes with 502 DEPLOY_FAILED after the unschedulable grace, well under
// ready_timeout_s, and leaves nothing behind.
func testServiceUnschedulable(t *testing.T, cs kubernetes.Interface, ns string) {
	s := mustService(t, cs, ns, serviceOpts{driver: func(c *k8s.Config) {
		c.NodeSelector = map[string]string{"warmpool.io/no-such-pool": "x"}
	}})
	const scope = "e2e-unsched"
	s.putConfig(scope, `{"deploy":{"ready_timeout_s":120},"pool":{"max_concurrency":4,"pod_concurrency":2}}`)
	start := time.Now()
	replies := make([]reply, 2)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() { replies[i] = s.route(scope, fmt.Sprintf("unsched-%d", i)) })
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("unschedulable: both routes answered in %s", took.Round(time.Millisecond))
	for _, r := range replies {
		if r.status != http.StatusBadGateway || r.errCode() != string(warmpool.CodeDeployFailed) || !strings.Contains(string(r.body), "unschedulable") {
			t.Errorf("route: %v, want 502 DEPLOY_FAILED naming unschedulable", r)
		}
	}
	if took > 15*time.Second {
		t.Errorf("took %s", took)
	}
	if p := s.pool(scope); len(p.Pods) != 0 || !p.clean() {
		t.Errorf("pool after the failed deploy: %v", p)
	}
	eventually(t, 20*time.Second, "the unschedulable pod is deleted", func() (bool, string) {
		left := scopePods(t, ns, scope)
		return len(left) == 0, fmt.Sprint(liveNames(left))
	})
}

// ---------- 4. death ----------

// testServicePodDeleted, with the background jobs running: min_idle_pods 1 keeps a warm
// pod; a busy pod deleted behind warmpool's back is purged and its session released; an
// idle one deleted at once (gone from the API server, not just terminating) is purged
// after the ghost grace and replaced.
func testServicePodDeleted(t *testing.T, cs kubernetes.Interface, ns string) {
	s := mustService(t, cs, ns, serviceOpts{jobs: true})
	const scope = "e2e-death"
	s.putConfig(scope, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":6,"pod_concurrency":2,"min_idle_pods":1}}`)
	ctx := context.Background()

	idleOne := func(p poolView, not ...string) string {
		for _, pp := range p.Pods {
			if pp.State == "idle" && !slices.Contains(not, pp.PodID) {
				return pp.PodID
			}
		}
		return ""
	}
	var w1, w2 string
	took := eventually(t, 20*time.Second, "autoscale makes a warm pod", func() (bool, string) {
		p := s.pool(scope)
		w1 = idleOne(p)
		return w1 != "", p.String()
	})
	t.Logf("warm pod %s after %s", w1, took.Round(time.Millisecond))
	b := s.mustRoute(scope, "d1")
	if b.PodID != w1 || !b.New {
		t.Fatalf("route did not take the warm pod %s: %+v", w1, b)
	}
	checkSSE(t, ns, b)
	eventually(t, 20*time.Second, "autoscale refills the warm pool", func() (bool, string) {
		p := s.pool(scope)
		w2 = idleOne(p, w1)
		return w2 != "" && p.clean(), p.String()
	})

	// The busy pod is deleted behind warmpool's back (with a grace period: it turns
	// Terminating first).
	start := time.Now()
	if err := admin.CoreV1().Pods(ns).Delete(ctx, w1, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the watch job purges the deleted pod", func() (bool, string) {
		p := s.pool(scope)
		return p.pod(w1) == nil, p.String()
	})
	t.Logf("deleted busy pod purged after %s", time.Since(start).Round(time.Millisecond))
	if s.touch(scope, "d1") {
		t.Error("touch of a session on a deleted pod: touched")
	}
	if r := s.call(http.MethodGet, "/v1/scopes/"+scope+"/sessions/d1", ""); r.status != http.StatusNotFound {
		t.Errorf("GET session of a deleted pod: %v", r)
	}
	waitGone(t, ns, w1, 20*time.Second)

	// The idle pod vanishes at once (grace 0): only the ghost check can tell; then
	// min_idle_pods brings a replacement.
	start = time.Now()
	if err := admin.CoreV1().Pods(ns).Delete(ctx, w2, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	var w3 string
	eventually(t, 20*time.Second, "a replacement warm pod", func() (bool, string) {
		p := s.pool(scope)
		w3 = idleOne(p, w1, w2)
		return p.pod(w2) == nil && w3 != "" && len(p.Pods) == 1 && p.clean(), p.String()
	})
	t.Logf("vanished idle pod %s replaced by %s after %s", w2, w3, time.Since(start).Round(time.Millisecond))
	kp, err := admin.CoreV1().Pods(ns).Get(ctx, w3, metav1.GetOptions{})
	if err != nil || !podReady(kp) || kp.Labels[warmpool.LabelScope] != scope {
		t.Fatalf("replacement %s in the API server: %v", w3, err)
	}
	if live := liveNames(scopePods(t, ns, scope)); !slices.Equal(live, []string{w3}) {
		t.Errorf("pods in the API server: %v, want just %s", live, w3)
	}
	b = s.mustRoute(scope, "d2")
	if b.PodID != w3 {
		t.Errorf("route after the replacement: %+v, want %s", b, w3)
	}
}

// nodeLostGrace is the replica's NodeLostGrace in the NotReady test.
const nodeLostGrace = 2 * time.Second

// testServiceNodeLost: the node of a busy pod is lost, deleted or NotReady past the
// driver's grace; the driver's node watch reports the pod node-lost, the watch job
// purges it, releases its session and deletes it. A pod on a node NotReady for less
// than the grace is left alone.
func testServiceNodeLost(t *testing.T, cs kubernetes.Interface, ns string, notReady bool) {
	ctx := context.Background()
	node := "e2e-svc-node-" + strconv.Itoa(rand.IntN(1e6))
	_, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        node,
		Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": node, "e2e-node": node},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{}) })
	s := mustService(t, cs, ns, serviceOpts{driver: func(c *k8s.Config) {
		c.NodeSelector = map[string]string{"e2e-node": node}
		c.UnschedulableGrace = 20 * time.Second // the new node may need a moment to turn Ready
		c.NodeLostGrace = nodeLostGrace
	}})
	const scope = "e2e-nodelost"
	s.putConfig(scope, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":4,"pod_concurrency":2}}`)
	b := s.mustRoute(scope, "n1")
	kp, err := admin.CoreV1().Pods(ns).Get(ctx, b.PodID, metav1.GetOptions{})
	if err != nil || kp.Spec.NodeName != node {
		t.Fatalf("pod %s on node %q (%v), want %s", b.PodID, kp.Spec.NodeName, err, node)
	}
	s.job("watch", s.srv.Sweeper.Watch)
	if p := s.pool(scope); p.pod(b.PodID) == nil {
		t.Fatalf("a healthy pod was buried: %v", p)
	}

	start := time.Now()
	if notReady {
		// kwok lets go of the node (else it makes it Ready again at once), then the node
		// reports NotReady, as when its kubelet stops posting status.
		since := setNodeNotReady(t, node)
		s.job("watch", s.srv.Sweeper.Watch)
		if age := time.Since(since); age < nodeLostGrace {
			if p := s.pool(scope); p.pod(b.PodID) == nil {
				t.Fatalf("pod buried %s after its node turned NotReady, within the grace: %v", age, p)
			}
		}
		start = since
	} else if err := admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 15*time.Second, "the watch job buries the pod of the lost node", func() (bool, string) {
		s.job("watch", s.srv.Sweeper.Watch)
		p := s.pool(scope)
		return len(p.Pods) == 0, p.String()
	})
	t.Logf("node loss purged the pod %s after the node went", time.Since(start).Round(time.Millisecond))
	if notReady && time.Since(start) < nodeLostGrace {
		t.Errorf("purged %s after NotReady, within the grace %s", time.Since(start), nodeLostGrace)
	}
	if s.touch(scope, "n1") {
		t.Error("touch of a session on a lost node: touched")
	}
	// No kubelet is left to finish the deletion, so the pod may stay Terminating.
	kp, err = admin.CoreV1().Pods(ns).Get(ctx, b.PodID, metav1.GetOptions{})
	if err == nil && kp.DeletionTimestamp == nil {
		t.Errorf("pod %s of the lost node was not deleted", b.PodID)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// kwokNodeAnnotation marks the nodes kwok plays the kubelet of.
const kwokNodeAnnotation = "kwok.x-k8s.io/node"

// setNodeNotReady takes the node from kwok and sets its Ready condition False. It
// returns the transition time as the API server keeps it (whole seconds).
func setNodeNotReady(t *testing.T, name string) time.Time {
	t.Helper()
	ctx := context.Background()
	nodes := admin.CoreV1().Nodes()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		delete(n.Annotations, kwokNodeAnnotation)
		_, err = nodes.Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	since := metav1.NewTime(time.Now().Truncate(time.Second))
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := nodes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		found := false
		for i := range n.Status.Conditions {
			if c := &n.Status.Conditions[i]; c.Type == corev1.NodeReady {
				c.Status, c.Reason, c.Message = corev1.ConditionFalse, "KubeletNotReady", "e2e: kubelet stopped posting status"
				c.LastTransitionTime, c.LastHeartbeatTime = since, since
				found = true
			}
		}
		if !found {
			return fmt.Errorf("node %s has no Ready condition: %+v", name, n.Status.Conditions)
		}
		_, err = nodes.UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// kwok must not have taken it back.
	if n, err := nodes.Get(ctx, name, metav1.GetOptions{}); err != nil || nodeReady(n) {
		t.Fatalf("node %s still Ready (%v)", name, err)
	}
	return since.Time
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// ---------- 5. reconcile ----------

// strayPod is a pod made directly in the API server, labelled as warmpool's. With
// annotate it carries every annotation reconcile needs to adopt it, created-at included.
func strayPod(ns, scope, ver string, fence int64, annotate bool, createdAt time.Time, extra map[string]string) *corev1.Pod {
	f := strconv.FormatInt(fence, 10)
	ann := map[string]string{}
	if annotate {
		ann = map[string]string{
			podpolicy.AnnotationScopeID: scope, podpolicy.AnnotationDeployVer: ver, podpolicy.AnnotationFence: f,
			podpolicy.AnnotationPort: "8080", podpolicy.AnnotationSSEPath: "/sse", podpolicy.AnnotationHealthPath: "/health",
			podpolicy.AnnotationCreatedAt: strconv.FormatInt(createdAt.UnixMilli(), 10),
		}
	}
	maps.Copy(ann, extra)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: warmpool.PodName(scope, fence), Namespace: ns,
			Labels: map[string]string{
				warmpool.LabelManagedBy: warmpool.ManagedByValue, warmpool.LabelScope: podpolicy.ScopeLabelValue(scope),
				warmpool.LabelDeployVer: ver, warmpool.LabelFence: f,
			},
			Annotations: ann,
		},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: warmpool.DefaultContainerName, Image: warmpool.DefaultImage,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
		},
	}
}

// testServiceReconcile runs the reconcile job by hand: a ready, fully annotated pod of the
// current deploy_ver is adopted and routable (and the fencing counter is raised past it);
// a labelled pod without annotations is deleted; one that never gets ready is left alone
// for the orphan grace, then deleted; a pod Redis has but the API server lost is purged
// after the ghost grace, its sessions released.
func testServiceReconcile(t *testing.T, cs kubernetes.Interface, ns string) {
	s := mustService(t, cs, ns, serviceOpts{})
	const scope = "e2e-recon"
	ver := s.putConfig(scope, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":4,"pod_concurrency":2}}`)
	ctx := context.Background()
	pods := admin.CoreV1().Pods(ns)

	const fAdopt, fBare, fHeld = 77, 78, 79
	created := time.UnixMilli(time.Now().UnixMilli()) // as the annotation says
	for _, p := range []*corev1.Pod{
		strayPod(ns, scope, ver, fAdopt, true, created, nil),
		strayPod(ns, scope, ver, fBare, false, created, nil),
		strayPod(ns, scope, ver, fHeld, true, created, map[string]string{holdAnnotation: "never-ready"}),
	} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	adopt, bare, held := warmpool.PodName(scope, fAdopt), warmpool.PodName(scope, fBare), warmpool.PodName(scope, fHeld)
	if _, err := waitPod(ns, 20*time.Second, func(p *corev1.Pod) bool { return p.Name == adopt && podReady(p) }); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the driver's cache holds the stray pods", func() (bool, string) {
		return s.listed(adopt) && s.listed(held), ""
	})

	// Adopted: idle in /pool, then routable.
	took := eventually(t, 10*time.Second, "reconcile adopts the ready annotated pod", func() (bool, string) {
		s.job("reconcile", s.srv.Sweeper.Reconcile)
		p := s.pool(scope)
		pp := p.pod(adopt)
		return pp != nil && pp.State == "idle" && pp.IdleSince != nil, p.String()
	})
	t.Logf("adopted %s in %s", adopt, took.Round(time.Millisecond))
	if time.Since(created) < orphanGrace {
		if _, err := pods.Get(ctx, held, metav1.GetOptions{}); err != nil {
			t.Errorf("pod %s, not ready and younger than the orphan grace, is gone: %v", held, err)
		}
	}
	b := s.mustRoute(scope, "r1")
	if b.PodID != adopt || !b.New {
		t.Fatalf("route after adoption: %+v, want %s", b, adopt)
	}
	checkSSE(t, ns, b)
	if b2 := s.mustRoute(scope, "r2"); b2.PodID != adopt {
		t.Errorf("r2: %+v, want the adopted pod's second slot", b2)
	}
	// A third session deploys a pod, fenced past every pod reconcile saw.
	routed := time.Now()
	b3 := s.mustRoute(scope, "r3")
	kp, err := pods.Get(ctx, b3.PodID, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := strconv.Atoi(kp.Labels[warmpool.LabelFence]); f <= fHeld {
		t.Errorf("new pod %s has fence %d, want above %d", b3.PodID, f, fHeld)
	}

	// Ghost: r3's pod vanishes from the API server at once.
	if err := pods.Delete(ctx, b3.PodID, metav1.DeleteOptions{GracePeriodSeconds: new(int64(0))}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the driver's cache drops the deleted pod", func() (bool, string) {
		return !s.listed(b3.PodID), ""
	})
	s.job("reconcile", s.srv.Sweeper.Reconcile)
	if age := time.Since(routed); age < ghostGrace {
		if s.pool(scope).pod(b3.PodID) == nil {
			t.Errorf("a pod registered %s ago, less than the ghost grace, was purged", age)
		}
	} else {
		t.Logf("slow machine: the ghost grace had passed before the first look (%s)", age)
	}
	took = eventually(t, 10*time.Second, "reconcile purges the ghost", func() (bool, string) {
		s.job("reconcile", s.srv.Sweeper.Reconcile)
		p := s.pool(scope)
		return p.pod(b3.PodID) == nil, p.String()
	})
	t.Logf("ghost purged within %s", took.Round(time.Millisecond))
	if s.touch(scope, "r3") {
		t.Error("touch of a session on a ghost pod: touched")
	}
	if !s.touch(scope, "r1") {
		t.Error("touch of a session on the adopted pod: not touched")
	}

	// Orphans: the bare one at once, the held one after the grace.
	took = eventually(t, 15*time.Second, "reconcile deletes the orphans", func() (bool, string) {
		s.job("reconcile", s.srv.Sweeper.Reconcile)
		var left []string
		for _, name := range []string{bare, held} {
			p, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.DeletionTimestamp == nil {
				left = append(left, name)
			}
		}
		return len(left) == 0, fmt.Sprint(left)
	})
	t.Logf("orphans deleted within %s", took.Round(time.Millisecond))
	if age := time.Since(created); age < orphanGrace {
		t.Errorf("the never-ready pod went %s after its creation, before the orphan grace", age)
	}

	// Redis and the API server agree on the scope's pods.
	eventually(t, 20*time.Second, "Redis and the API server hold the same pods", func() (bool, string) {
		p := s.pool(scope)
		live := liveNames(scopePods(t, ns, scope))
		return slices.Equal(p.ids(), live) && slices.Equal(live, []string{adopt}) && p.clean(),
			fmt.Sprintf("redis %v, api %v", p.ids(), live)
	})
}

// ---------- 6. Redis data loss ----------

// testServiceRedisLost: Redis loses every key of the deployment; requests fail closed
// with 503 STORE_UNAVAILABLE; reconcile rebuilds the pool from the API server (labels and
// annotations) and the config store. The pods come back with every slot held (their
// sessions were lost with the data and may still run) until session_ttl_s has passed;
// then they are idle and routable, and the fencing counter is raised past them, so the
// next deploy makes a new pod instead of meeting an old one's name.
func testServiceRedisLost(t *testing.T, cs kubernetes.Interface, ns string) {
	s := mustService(t, cs, ns, serviceOpts{})
	const scope = "e2e-lost"
	const sessionTTL = 3 * time.Second
	s.putConfig(scope, `{"deploy":{"ready_timeout_s":30},"pool":{"max_concurrency":6,"pod_concurrency":2,"session_ttl_s":3}}`)
	before := map[string]bool{}
	for _, id := range []string{"l1", "l2", "l3"} {
		before[s.mustRoute(scope, id).PodID] = true
	}
	if len(before) != 2 {
		t.Fatalf("pods before the loss: %v", before)
	}
	// The ground truth the rebuild reads is the driver's informer cache.
	lag := eventually(t, 10*time.Second, "the driver's cache shows the pods Ready", func() (bool, string) {
		return s.cacheReady(slices.Collect(maps.Keys(before))...)
	})
	t.Logf("the driver's cache showed both pods Ready %s after the routes", lag.Round(time.Millisecond))

	// Every key of the deployment goes, as with a restart without persistence.
	ctx := context.Background()
	var keys []string
	iter := s.redis.Admin.Scan(ctx, 0, s.redis.Prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) == 0 {
		t.Fatalf("scan: %d keys, %v", len(keys), err)
	}
	for _, k := range keys {
		if err := s.redis.Admin.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if r := s.route(scope, "l4"); r.status != http.StatusServiceUnavailable || r.errCode() != string(warmpool.CodeStoreUnavailable) {
		t.Errorf("route on a Redis that lost its data: %v, want 503 STORE_UNAVAILABLE", r)
	}
	if r := s.call(http.MethodGet, "/readyz", ""); r.status != http.StatusServiceUnavailable {
		t.Errorf("readyz on a Redis that lost its data: %v", r)
	}

	s.job("reconcile", s.srv.Sweeper.Reconcile)
	rebuilt := time.Now()
	p := s.pool(scope)
	if len(p.Pods) != 2 || !p.clean() {
		t.Fatalf("pool after the rebuild: %v", p)
	}
	for _, pp := range p.Pods {
		if !before[pp.PodID] || pp.State != "busy" || pp.Sessions != 0 {
			t.Errorf("rebuilt pod %+v, want one of %v held with no session known", pp, before)
		}
	}
	if s.touch(scope, "l1") {
		t.Error("a session survived the data loss")
	}
	s.must(http.MethodGet, "/readyz", "", nil)

	// Once session_ttl_s has passed, the expiry job frees the held slots.
	eventually(t, sessionTTL+10*time.Second, "the rebuilt pods idle once session_ttl_s has passed", func() (bool, string) {
		s.job("sessions", s.srv.Sweeper.ExpireSessions)
		p := s.pool(scope)
		idle := 0
		for _, pp := range p.Pods {
			if pp.State == "idle" && pp.Sessions == 0 {
				idle++
			}
		}
		return idle == 2 && len(p.Pods) == 2, p.String()
	})
	if held := time.Since(rebuilt); held < sessionTTL-time.Second {
		t.Errorf("the rebuilt pods were freed %s after the rebuild, before session_ttl_s (%s)", held, sessionTTL)
	}

	// Both pods serve again; a fifth session needs a new pod, with a fresh name.
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		if b := s.mustRoute(scope, id); !before[b.PodID] {
			t.Errorf("%s went to %s, not to a rebuilt pod", id, b.PodID)
		}
	}
	b := s.mustRoute(scope, "m5")
	if before[b.PodID] {
		t.Fatalf("m5 went to a full pod %s", b.PodID)
	}
	checkSSE(t, ns, b)
	if live := liveNames(scopePods(t, ns, scope)); len(live) != 3 || !slices.Contains(live, b.PodID) {
		t.Errorf("pods in the API server: %v", live)
	}
	if p := s.pool(scope); len(p.Pods) != 3 {
		t.Errorf("pool: %v", p)
	}
}
