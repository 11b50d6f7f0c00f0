//go:build e2e_k8s

package k8s_e2e

// The Kubernetes case of the fault matrix (docs/reliability.md): the rig's
// kube-apiserver stopped (SIGSTOP) for 10 s in the middle of a burst of cold routes
// on a `warmpool serve` process with the kubernetes driver, then resumed (SIGCONT).

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/internal/testing/syncbuf"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/podpolicy"
	"github.com/warmpool/warmpool/redisstore"
)

const (
	// apiStop is how long the kube-apiserver is stopped.
	apiStop = 10 * time.Second
	// The burst's scope: one session a pod, four pods at most; a deploy waits for
	// Ready up to burstReady, shorter than the stop, so that deploys the stop cuts
	// fail and leave their pods behind; a queued route waits up to burstWait.
	burstReady = 5
	burstWait  = 8
	burstScope = `{"deploy":{"ready_timeout_s":5},"pool":{"max_concurrency":4,"pod_concurrency":1,"queue_size":8,"wait_timeout_s":8,"session_ttl_s":120}}`
	// answerBound is the longest a route may take: a wait for capacity, then a whole
	// deploy, plus a margin. Longer is a hang.
	answerBound = (burstReady+burstWait)*time.Second + 5*time.Second
)

// specAnswers are the error codes SPEC §3 gives a route that is not served, by status.
var specAnswers = map[int][]string{
	http.StatusBadGateway:         {string(warmpool.CodeDeployFailed)},
	http.StatusServiceUnavailable: {string(warmpool.CodeNoPodAvailable), string(warmpool.CodeQueueFull), string(warmpool.CodeStoreUnavailable)},
	http.StatusGatewayTimeout:     {string(warmpool.CodeWaitTimeout)},
}

// TestAPIServerStoppedDuringBurst: eight cold routes, the kube-apiserver stopped as
// soon as Redis holds the burst's first deploy lease (its pod being created), four more
// routes while it is stopped, then it resumes. Every route answers within answerBound
// with a pod or a SPEC error; the API server never holds more than max_pods live pods
// of the scope; after the resume the same process serves new routes (warm and cold) and
// the scope settles: the SPEC §6 invariants with nothing in flight, and the API
// server's pods exactly Redis's (no orphan).
func TestAPIServerStoppedDuringBurst(t *testing.T) {
	apiserver := apiserverProcess(t)
	ns := mustNamespace(t)
	t.Cleanup(func() { deleteManagedPods(t, ns) }) // runs last
	r := testredis.New(t)
	s := startServe(t, r, ns)

	const scope, cold = "burst", "cold"
	s.putConfig(scope, burstScope)
	s.putConfig(cold, burstScope)
	cfg, versions := storedConfig(t, s, scope)
	store := redisstore.NewStore(r.Client, r.Prefix)

	redisWatch := watchInvariants(store, scope, cfg, versions)
	podWatch := watchPods(ns, scope)

	var (
		mu      sync.Mutex
		replies []reply
		wg      sync.WaitGroup
	)
	route := func(session string) {
		defer wg.Done()
		rep := s.route(scope, session)
		mu.Lock()
		replies = append(replies, rep)
		mu.Unlock()
	}
	for i := range 8 {
		wg.Add(1)
		go route(fmt.Sprintf("b%d", i))
	}
	awaitDeploy(t, store, scope)
	if err := apiserver.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := apiserver.Signal(syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	t.Logf("kube-apiserver (pid %d) stopped during the burst's first deploy; %d pod object(s) of the burst seen by then", apiserver.Pid, podWatch.created())

	// Four more routes while the API server is away.
	time.Sleep(2 * time.Second)
	for i := range 4 {
		wg.Add(1)
		go route(fmt.Sprintf("w%d", i))
	}
	time.Sleep(apiStop - time.Since(stopped))
	resume()
	resumedAt := time.Now()
	t.Logf("kube-apiserver resumed after %s", resumedAt.Sub(stopped).Round(time.Millisecond))
	wg.Wait()

	ops := len(replies)
	outcomes := map[string]int{}
	var slowest time.Duration
	for _, rep := range replies {
		slowest = max(slowest, rep.took)
		if rep.took > answerBound {
			t.Errorf("%v: took longer than %s (a hang)", rep, answerBound)
		}
		switch {
		case rep.err != nil:
			t.Errorf("%v: no answer", rep)
		case rep.status == http.StatusOK:
			var b struct {
				PodID string `json:"pod_id"`
			}
			if err := json.Unmarshal(rep.body, &b); err != nil || b.PodID == "" {
				t.Errorf("%v: 200 without a pod", rep)
			}
			outcomes["200"]++
		case slices.Contains(specAnswers[rep.status], rep.errCode()):
			outcomes[fmt.Sprintf("%d %s", rep.status, rep.errCode())]++
		default:
			t.Errorf("%v: not an answer SPEC §3 gives a route", rep)
		}
	}
	t.Logf("burst answers: %v, the slowest after %s", outcomes, slowest.Round(time.Millisecond))

	// Recovery without a restart: the burst's sessions end, new ones are served, on
	// the burst's pods or new ones, and a scope never deployed gets its first pod.
	for _, rep := range replies {
		if rep.status == http.StatusOK {
			var b struct {
				SessionID string `json:"session_id"`
			}
			_ = json.Unmarshal(rep.body, &b)
			s.end(scope, b.SessionID)
			ops++
		}
	}
	var firstServed time.Duration
	for i := range 4 {
		session := fmt.Sprintf("a%d", i)
		// The deploys the outage failed put the scope's refill in backoff (SPEC §11.3:
		// 5 s doubling per failure in a row); the first route after the resume waits it out.
		within := 30 * time.Second
		if i == 0 {
			within = 90 * time.Second
		}
		eventually(t, within, "route "+session+" after the resume", func() (bool, string) {
			ops++
			rep := s.route(scope, session)
			return rep.status == http.StatusOK, rep.String()
		})
		if i == 0 {
			firstServed = time.Since(resumedAt)
		}
	}
	coldBinding := s.mustRoute(cold, "c0")
	t.Logf("after the resume: first route served %s after it; a cold route on a new scope served on %s",
		firstServed.Round(time.Millisecond), coldBinding.PodID)
	for i := range 4 {
		s.end(scope, fmt.Sprintf("a%d", i))
	}
	s.end(cold, "c0")
	ops += 6

	// The scope settles: invariants with nothing in flight, and the API server's pods
	// exactly Redis's, none orphaned by the deploys the stop cut.
	settleChecks := 0
	var last []string
	recovered := eventually(t, 45*time.Second, "the scope settled, no orphan pod", func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		snap, err := store.Snapshot(ctx, scope)
		if err != nil {
			return false, err.Error()
		}
		settleChecks++
		last = invariant.Violations(snap, cfg, versions, true)
		last = append(last, orphans(ctx, ns, scope, snap, cfg.Pool.MaxPods())...)
		return len(last) == 0, strings.Join(last, "; ")
	})
	recovery := time.Since(resumedAt)

	violations, checks, registered := redisWatch.stop()
	created, orphaned := podWatch.created(), podWatch.unregistered(registered)
	maxLive, lists := podWatch.stop()
	for _, v := range violations {
		t.Errorf("while the burst ran: %s", v)
	}
	if maxLive > cfg.Pool.MaxPods() {
		t.Errorf("the API server held %d live pods of the scope at once > max_pods %d", maxLive, cfg.Pool.MaxPods())
	}
	if checks == 0 || lists == 0 {
		t.Errorf("nothing was watched: %d snapshots, %d pod lists", checks, lists)
	}
	t.Logf("| kube-apiserver stopped | SIGSTOP of the kube-apiserver for %s once the first of a burst of 8 cold routes deploys (max_pods %d, pod_concurrency 1, ready_timeout_s 5), 4 more routes while stopped; `warmpool serve --driver kubernetes` | %d | %d | %d | %.2f s | %s | answers %v, the slowest after %s; %d pod objects created (%d never registered in Redis), at most %d live at once; first route served %s after the resume; settled %s after the last session ended |",
		apiStop, cfg.Pool.MaxPods(), ops, checks+settleChecks, len(violations), recovery.Seconds(),
		map[bool]string{true: "pass", false: "fail"}[!t.Failed()], outcomes, slowest.Round(time.Millisecond), created, orphaned, maxLive,
		firstServed.Round(time.Millisecond), recovered.Round(time.Millisecond))
}

// awaitDeploy returns as soon as a snapshot of scope shows a deploy lease: a deploy
// under way. It polls every few milliseconds, since a deploy on the rig is quick.
func awaitDeploy(t *testing.T, store *redisstore.Store, scope string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		snap, err := store.Snapshot(ctx, scope)
		cancel()
		if err == nil && len(snap.Deploys) > 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("no deploy of the burst within 10s")
}

// apiserverProcess is the rig's kube-apiserver, whose pid scripts/k8s-up.sh writes
// next to the kubeconfig.
func apiserverProcess(t *testing.T) *os.Process {
	t.Helper()
	pidFile := filepath.Join(filepath.Dir(os.Getenv("WARMPOOL_KUBECONFIG")), "kube-apiserver.pid")
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the rig's kube-apiserver pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err != nil || strings.TrimSpace(string(comm)) != "kube-apiserver" {
		t.Fatalf("pid %d of %s is not a running kube-apiserver (%q, %v)", pid, pidFile, comm, err)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startServe starts `warmpool serve` with the kubernetes driver on the rig, Redis as
// the README's ACL user, and short sweeps and graces, then args (a flag given again
// there wins); it is stopped with the test, and its stderr is the service's log.
func startServe(t *testing.T, r *testredis.Redis, ns string, args ...string) *service {
	t.Helper()
	flags := append([]string{"--store", filepath.Join(t.TempDir(), "config.db"), "--kubeconfig", os.Getenv("WARMPOOL_KUBECONFIG"),
		"--instance-id", "e2e-stop-" + strconv.Itoa(rand.IntN(1e6)),
		"--sweep-interval", "250ms", "--reconcile-interval", "1s", "--reconcile-duty", "1", "--orphan-grace", "3s", "--ghost-grace", "3s"}, args...)
	s, _ := serveProc(t, r, ns, &http.Client{Timeout: answerBound + 30*time.Second}, flags...)
	return s
}

// serveProc starts `warmpool serve` on r with the kubernetes driver in ns, on a free
// loopback port, with flags added, and returns it, called with client, and its pid
// once /readyz answers 200. It is killed with the test; its stderr is logged when the
// test failed.
func serveProc(t *testing.T, r *testredis.Redis, ns string, client *http.Client, flags ...string) (*service, int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	args := append([]string{"serve", "--listen", addr, "--redis", r.URL(), "--prefix", r.Prefix,
		"--driver", "kubernetes", "--namespace", ns}, flags...)
	cmd := exec.Command(warmpoolBin(t), args...)
	stderr := new(syncbuf.Buffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("warmpool serve stderr:\n%s", stderr.String())
		}
	})
	s := &service{t: t, redis: r, base: "http://" + addr, ns: ns, log: stderr, client: client}
	eventually(t, 30*time.Second, "warmpool serve ready", func() (bool, string) {
		select {
		case <-done:
			t.Fatalf("warmpool serve exited: %v\n%s", cmd.ProcessState, stderr.String())
		default:
		}
		rep := s.call(http.MethodGet, "/readyz", "")
		return rep.status == http.StatusOK, rep.String()
	})
	return s, cmd.Process.Pid
}

// warmpoolBin is the binary `make build` made (WARMPOOL_BIN), else one built now.
func warmpoolBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("WARMPOOL_BIN"); bin != "" {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	bin := filepath.Join(t.TempDir(), "warmpool")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/warmpool/warmpool/cmd/warmpool").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// storedConfig is the scope's config as stored, defaults filled, and its deploy_ver:
// what the invariants are checked against.
func storedConfig(t *testing.T, s *service, scope string) (warmpool.ScopeConfig, []string) {
	t.Helper()
	var out warmpool.StoredConfig
	s.must(http.MethodGet, "/v1/scopes/"+scope+"/config", "", &out)
	return out.Config, []string{out.DeployVer}
}

// invariantWatch checks the SPEC §6 invariants on a snapshot of a scope every 20 ms.
type invariantWatch struct {
	halt   chan struct{}
	done   chan struct{}
	found  map[string]bool
	pods   map[string]bool // every pod registered in Redis
	checks int
}

func watchInvariants(store *redisstore.Store, scope string, cfg warmpool.ScopeConfig, versions []string) *invariantWatch {
	w := &invariantWatch{halt: make(chan struct{}), done: make(chan struct{}), found: map[string]bool{}, pods: map[string]bool{}}
	go func() {
		defer close(w.done)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			snap, err := store.Snapshot(ctx, scope)
			cancel()
			if err != nil {
				w.found["snapshot: "+err.Error()] = true
			} else {
				w.checks++
				for _, p := range snap.Pods {
					w.pods[p.Pod.ID] = true
				}
				for _, v := range invariant.Violations(snap, cfg, versions, false) {
					w.found[v] = true
				}
			}
			select {
			case <-w.halt:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *invariantWatch) stop() (violations []string, checks int, pods map[string]bool) {
	close(w.halt)
	<-w.done
	for v := range w.found {
		violations = append(violations, v)
	}
	slices.Sort(violations)
	return violations, w.checks, w.pods
}

// podWatch lists the scope's pods in the API server every 100 ms and keeps the most
// live (not terminating) ones seen at once; lists fail while the API server is stopped.
type podWatch struct {
	halt  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	names map[string]bool
	most  int
	lists int
}

func watchPods(ns, scope string) *podWatch {
	w := &podWatch{halt: make(chan struct{}), done: make(chan struct{}), names: map[string]bool{}}
	sel := warmpool.LabelScope + "=" + podpolicy.ScopeLabelValue(scope)
	go func() {
		defer close(w.done)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
			cancel()
			if err == nil {
				w.mu.Lock()
				w.lists++
				live := 0
				for _, p := range l.Items {
					w.names[p.Name] = true
					if p.DeletionTimestamp == nil {
						live++
					}
				}
				w.most = max(w.most, live)
				w.mu.Unlock()
			}
			select {
			case <-w.halt:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// created is how many pod objects of the scope have been seen.
func (w *podWatch) created() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.names)
}

// unregistered counts the pod objects seen that Redis never registered: pods whose
// deploy gave up (the orphans the sweeps must delete).
func (w *podWatch) unregistered(registered map[string]bool) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for name := range w.names {
		if !registered[name] {
			n++
		}
	}
	return n
}

func (w *podWatch) stop() (most, lists int) {
	close(w.halt)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.most, w.lists
}

// orphans compares the API server's pods of a scope (terminating ones included) with
// Redis's: each must be the other's, Ready, and no more than maxPods.
func orphans(ctx context.Context, ns, scope string, snap redisstore.Snapshot, maxPods int) []string {
	l, err := admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: warmpool.LabelScope + "=" + podpolicy.ScopeLabelValue(scope)})
	if err != nil {
		return []string{"list pods: " + err.Error()}
	}
	var out []string
	inRedis := map[string]bool{}
	for _, p := range snap.Pods {
		inRedis[p.Pod.ID] = true
	}
	for i := range l.Items {
		p := &l.Items[i]
		switch {
		case !inRedis[p.Name]:
			out = append(out, fmt.Sprintf("pod %s unknown to Redis (terminating %v)", p.Name, p.DeletionTimestamp != nil))
		case p.DeletionTimestamp != nil || !podReady(p):
			out = append(out, fmt.Sprintf("pod %s of Redis is not a live Ready pod", p.Name))
		}
		delete(inRedis, p.Name)
	}
	for id := range inRedis {
		out = append(out, fmt.Sprintf("Redis pod %s missing from the API server", id))
	}
	if len(l.Items) > maxPods {
		out = append(out, fmt.Sprintf("%d pods in the API server > max_pods %d", len(l.Items), maxPods))
	}
	return out
}
