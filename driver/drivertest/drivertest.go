// Package drivertest checks that a pod driver keeps the warmpool.PodDriver contract. A
// driver's own tests call Run with a function that builds the driver under test together
// with the driver-specific ways to break it (kill a pod, make deploys fail or stall);
// every driver runs the same checks. It imports only the root package.
package drivertest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
)

// Mode says how the deploys of a driver built for one check go.
type Mode int

const (
	// Healthy drivers deploy pods that get ready.
	Healthy Mode = iota
	// Failing drivers fail every deploy by themselves (arguments the agent refuses, a
	// pod no node can take, an injected failure) with DEPLOY_FAILED.
	Failing
	// Stalled drivers start pods that never get ready by themselves: a deploy ends with
	// the ready timeout or with its ctx.
	Stalled
)

func (m Mode) String() string {
	switch m {
	case Healthy:
		return "healthy"
	case Failing:
		return "failing"
	case Stalled:
		return "stalled"
	}
	return "mode " + strconv.Itoa(int(m))
}

// DefaultSettle bounds the waits for what a driver learns after the fact when
// Harness.Settle is zero.
const DefaultSettle = 20 * time.Second

// readyTimeoutS is the ready timeout of every healthy deploy: generous, so that a loaded
// machine starting an agent does not fail a check.
const readyTimeoutS = 120

// Harness is one driver under test, built by the function passed to Run for one check;
// that function also arranges the driver's Close (t.Cleanup).
type Harness struct {
	// Driver is the driver under test.
	Driver warmpool.PodDriver
	// Spec, when set, adjusts the deploy spec of every request (e.g. agent arguments
	// that make a Failing driver's agent exit); the suite normalizes the result.
	Spec func(*warmpool.DeploySpec)
	// FailReason is a part of the DEPLOY_FAILED message of a Failing driver's deploys.
	FailReason string
	// Kill makes a live pod die behind the driver's back (its process is killed, its
	// pod fails). Healthy harnesses need it.
	Kill func(t *testing.T, pod warmpool.Pod)
	// Serving, when set, waits until the endpoints of a pod that Deploy returned answer:
	// for a rig whose stand-in kubelet starts serving a little after the API server
	// reports the pod Ready.
	Serving func(t *testing.T, pod warmpool.Pod)
	// Labels, when set, returns the labels the pod carries where the driver keeps them
	// (the API object, the state file); the suite checks warmpool's four.
	Labels func(t *testing.T, pod warmpool.Pod) map[string]string
	// Leftovers, when set, lists what of the pod named podID still exists outside the
	// driver's List (processes, objects); the suite awaits it empty once a pod is
	// deleted or its deploy failed.
	Leftovers func(t *testing.T, podID string) []string
	// ServesHTTP says that pods answer real HTTP: the suite reads the first event of
	// each deployed pod's SSE stream.
	ServesHTTP bool
	// Settle bounds the waits for what the driver learns after the fact: a death seen
	// by List, a deleted pod's probe failing, a failed deploy's pod leaving List. Zero
	// means DefaultSettle.
	Settle time.Duration
}

// Run checks the PodDriver contract, one subtest a check, each on a driver newHarness
// builds for it in the mode the check needs.
func Run(t *testing.T, newHarness func(t *testing.T, mode Mode) *Harness) {
	for _, c := range []struct {
		name  string
		mode  Mode
		check func(*testing.T, *Harness)
	}{
		{"DeployListProbeDelete", Healthy, checkLifecycle},
		{"DeleteUnknown", Healthy, checkDeleteUnknown},
		{"ListOldestFirst", Healthy, checkListOrder},
		{"DeadPod", Healthy, checkDeadPod},
		{"SpecNotNormalized", Healthy, checkNotNormalized},
		{"DeployFails", Failing, checkDeployFails},
		{"ReadyTimeout", Stalled, checkReadyTimeout},
		{"CancelledContext", Stalled, checkCancelled},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, c.mode)
			if h == nil || h.Driver == nil {
				t.Fatalf("the harness has no driver for mode %s", c.mode)
			}
			c.check(t, h)
		})
	}
}

// checkLifecycle: a deploy returns a Ready pod carrying the request's scope, deploy_ver
// and fence with SSE and health URLs, having reported its phases in order (create
// first, ready last); Probe passes and List shows the same pod; Delete removes it, its
// probe then fails, and a second Delete is no error.
func checkLifecycle(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	req := h.request(t, "dt_life.cycle", 7)
	var mu sync.Mutex
	var phases []string
	req.OnPhase = func(phase string) { mu.Lock(); phases = append(phases, phase); mu.Unlock() }
	pod, err := h.Driver.Deploy(ctx, req)
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	mu.Lock()
	checkPhases(t, phases)
	mu.Unlock()
	if pod.ID == "" || pod.ScopeID != req.ScopeID || pod.DeployVer != req.DeployVer || pod.Fence != req.Fence ||
		!pod.Ready || pod.Dead != "" || pod.CreatedAt <= 0 {
		t.Fatalf("Deploy returned %+v, want a Ready pod of %s, deploy_ver %s, fence %d", pod, req.ScopeID, req.DeployVer, req.Fence)
	}
	checkURL(t, "SSE", pod.SSEURL, req.Spec.SSEPath)
	checkURL(t, "health", pod.HealthURL, req.Spec.HealthPath)
	if h.Labels != nil {
		labels := h.Labels(t, pod)
		for k, v := range map[string]string{
			warmpool.LabelManagedBy: warmpool.ManagedByValue,
			warmpool.LabelScope:     req.ScopeID,
			warmpool.LabelDeployVer: req.DeployVer,
			warmpool.LabelFence:     strconv.FormatInt(req.Fence, 10),
		} {
			if labels[k] != v {
				t.Errorf("label %s = %q, want %q", k, labels[k], v)
			}
		}
	}
	if h.Serving != nil {
		h.Serving(t, pod)
	}
	if err := h.Driver.Probe(ctx, pod); err != nil {
		t.Errorf("Probe of the live pod: %v", err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := h.Driver.Probe(cancelled, pod); err == nil {
		t.Error("Probe with a cancelled ctx: nil error")
	}
	if h.ServesHTTP {
		if ev := FirstEvent(t, pod.SSEURL); !strings.HasPrefix(ev, "event: hello\n") || !strings.Contains(ev, pod.ID) {
			t.Errorf("first SSE event %q, want hello naming %s", ev, pod.ID)
		}
	}
	var listed warmpool.Pod
	h.await(t, "List shows the ready pod", func() (bool, string) {
		pods := h.list(t, ctx, req.ScopeID)
		for _, p := range pods {
			if p.ID == pod.ID && p.Ready {
				listed = p
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", pods)
	})
	if listed != pod {
		t.Errorf("List shows %+v, Deploy returned %+v", listed, pod)
	}

	if err := h.Driver.Delete(ctx, pod); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	h.awaitGone(t, ctx, req.ScopeID, pod.ID)
	h.await(t, "the deleted pod's probe to fail", func() (bool, string) {
		return h.Driver.Probe(ctx, pod) != nil, "Probe answers nil"
	})
	if err := h.Driver.Delete(ctx, pod); err != nil {
		t.Errorf("second Delete: %v, want nil", err)
	}
}

// checkDeleteUnknown: deleting a pod the driver never made is no error, twice.
func checkDeleteUnknown(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	pod := warmpool.Pod{ID: warmpool.PodName("dt_unknown", 1), ScopeID: "dt_unknown", DeployVer: "v0", Fence: 1}
	for i := range 2 {
		if err := h.Driver.Delete(ctx, pod); err != nil {
			t.Errorf("Delete #%d of an unknown pod: %v, want nil", i+1, err)
		}
	}
}

// checkListOrder: List answers oldest first.
func checkListOrder(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	var pods []warmpool.Pod
	for fence := int64(1); fence <= 2; fence++ {
		pod, err := h.Driver.Deploy(ctx, h.request(t, "dt_order", fence))
		if err != nil {
			t.Fatalf("Deploy of fence %d: %v", fence, err)
		}
		pods = append(pods, pod)
	}
	var listed []warmpool.Pod
	h.await(t, "List shows both pods", func() (bool, string) {
		listed = h.list(t, ctx, "dt_order")
		return len(listed) == 2, fmt.Sprintf("%+v", listed)
	})
	sorted := slices.Clone(listed)
	warmpool.SortPods(sorted)
	if !slices.Equal(ids(listed), ids(sorted)) || !slices.Equal(ids(listed), ids(pods)) {
		t.Errorf("List order %v, want oldest first %v", ids(listed), ids(pods))
	}
	for _, p := range pods {
		if err := h.Driver.Delete(ctx, p); err != nil {
			t.Errorf("Delete: %v", err)
		}
	}
	for _, p := range pods {
		h.awaitGone(t, ctx, "dt_order", p.ID)
	}
}

// checkDeadPod: a pod that dies behind the driver's back is listed Dead and not Ready,
// its probe fails, and Delete still removes it. A driver that reports deaths
// (warmpool.DeathNotifier) reports it dead and not Ready.
func checkDeadPod(t *testing.T, h *Harness) {
	if h.Kill == nil {
		t.Fatal("the harness cannot kill a pod (Harness.Kill)")
	}
	ctx := testCtx(t)
	var mu sync.Mutex
	var reported []warmpool.Pod
	dn, notifies := h.Driver.(warmpool.DeathNotifier)
	if notifies {
		dn.OnDeath(func(p warmpool.Pod) { mu.Lock(); reported = append(reported, p); mu.Unlock() })
	}
	pod, err := h.Driver.Deploy(ctx, h.request(t, "dt_dead", 1))
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	h.Kill(t, pod)
	if notifies {
		h.await(t, "OnDeath reports the killed pod", func() (bool, string) {
			mu.Lock()
			defer mu.Unlock()
			for _, p := range reported {
				if p.ID == pod.ID {
					if p.Dead == "" || p.Ready || p.ScopeID != pod.ScopeID {
						t.Fatalf("OnDeath reported %+v, want it dead, not Ready, of scope %s", p, pod.ScopeID)
					}
					return true, ""
				}
			}
			return false, fmt.Sprintf("reported %+v", reported)
		})
	}
	h.await(t, "List reports the killed pod dead", func() (bool, string) {
		pods := h.list(t, ctx, pod.ScopeID)
		for _, p := range pods {
			if p.ID == pod.ID && p.Dead != "" {
				if p.Ready {
					t.Fatalf("dead pod listed Ready: %+v", p)
				}
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", pods)
	})
	h.await(t, "the dead pod's probe to fail", func() (bool, string) {
		return h.Driver.Probe(ctx, pod) != nil, "Probe answers nil"
	})
	if err := h.Driver.Delete(ctx, pod); err != nil {
		t.Fatalf("Delete of the dead pod: %v", err)
	}
	h.awaitGone(t, ctx, pod.ScopeID, pod.ID)
}

// checkNotNormalized: a spec without a ready timeout is refused with VALIDATION, not
// filled in, and creates nothing.
func checkNotNormalized(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	req := h.request(t, "dt_raw", 1)
	req.Spec.ReadyTimeoutS = 0
	_, err := h.Driver.Deploy(ctx, req)
	WantError(t, err, warmpool.CodeValidation, "ready_timeout_s")
	h.awaitGone(t, ctx, req.ScopeID, warmpool.PodName(req.ScopeID, req.Fence))
}

// checkDeployFails: a deploy that cannot come up yields DEPLOY_FAILED saying why and
// leaves nothing behind.
func checkDeployFails(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	req := h.request(t, "dt_fail", 1)
	_, err := h.Driver.Deploy(ctx, req)
	WantError(t, err, warmpool.CodeDeployFailed, h.FailReason)
	h.awaitGone(t, ctx, req.ScopeID, warmpool.PodName(req.ScopeID, req.Fence))
}

// checkReadyTimeout: a pod not ready within ready_timeout_s fails its deploy with
// DEPLOY_FAILED and is removed.
func checkReadyTimeout(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	req := h.request(t, "dt_slow", 1)
	req.Spec.ReadyTimeoutS = 1
	start := time.Now()
	_, err := h.Driver.Deploy(ctx, req)
	WantError(t, err, warmpool.CodeDeployFailed, "")
	if took := time.Since(start); took < time.Second {
		t.Errorf("the deploy failed after %s, before its ready timeout of 1s", took)
	}
	h.awaitGone(t, ctx, req.ScopeID, warmpool.PodName(req.ScopeID, req.Fence))
}

// checkCancelled: a deploy under a ctx that is already cancelled, or that is cancelled
// while the pod starts, answers ctx.Err() and leaves nothing behind.
func checkCancelled(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	done, cancel := context.WithCancel(ctx)
	cancel()
	req := h.request(t, "dt_cancel", 1)
	if _, err := h.Driver.Deploy(done, req); !errors.Is(err, context.Canceled) {
		t.Errorf("Deploy with a cancelled ctx: %v, want context.Canceled", err)
	}
	h.awaitGone(t, ctx, req.ScopeID, warmpool.PodName(req.ScopeID, req.Fence))

	req = h.request(t, "dt_cancel", 2)
	name := warmpool.PodName(req.ScopeID, req.Fence)
	var wg sync.WaitGroup
	defer wg.Wait()
	dctx, cancel := context.WithCancel(ctx)
	defer cancel() // before the Wait above: a failed check must not leave the deploy running
	errc := make(chan error, 1)
	wg.Go(func() {
		_, err := h.Driver.Deploy(dctx, req)
		errc <- err
	})
	h.await(t, "the starting pod to be listed", func() (bool, string) {
		pods := h.list(t, ctx, req.ScopeID)
		for _, p := range pods {
			if p.ID == name {
				if p.Ready {
					t.Fatalf("a stalled pod is listed Ready: %+v", p)
				}
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", pods)
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("Deploy cancelled while starting: %v, want context.Canceled", err)
	}
	h.awaitGone(t, ctx, req.ScopeID, name)
}

// phaseOrder is the order of the phases a driver may report.
var phaseOrder = []string{warmpool.PhaseCreate, warmpool.PhaseScheduled, warmpool.PhaseStarted, warmpool.PhaseReady}

// checkPhases requires the phases of a successful deploy: known ones, each once, in
// order, from create to ready.
func checkPhases(t *testing.T, phases []string) {
	t.Helper()
	last := -1
	for _, p := range phases {
		i := slices.Index(phaseOrder, p)
		if i <= last {
			t.Fatalf("phases %q: want some of %q, each once and in that order", phases, phaseOrder)
		}
		last = i
	}
	if len(phases) < 2 || phases[0] != warmpool.PhaseCreate || phases[len(phases)-1] != warmpool.PhaseReady {
		t.Fatalf("phases %q: want %s first and %s last", phases, warmpool.PhaseCreate, warmpool.PhaseReady)
	}
}

// request is a deploy request of scope with a normalized spec.
func (h *Harness) request(t *testing.T, scope string, fence int64) warmpool.DeployRequest {
	t.Helper()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Deploy.ReadyTimeoutS = readyTimeoutS
	if h.Spec != nil {
		h.Spec(&cfg.Deploy)
	}
	if err := cfg.Normalize(); err != nil {
		t.Fatalf("the harness's spec: %v", err)
	}
	return warmpool.DeployRequest{ScopeID: scope, DeployVer: cfg.Deploy.DeployVer(), Fence: fence, Spec: cfg.Deploy}
}

// list is the driver's List, only the pods of scope.
func (h *Harness) list(t *testing.T, ctx context.Context, scope string) []warmpool.Pod {
	t.Helper()
	pods, err := h.Driver.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return slices.DeleteFunc(pods, func(p warmpool.Pod) bool { return p.ScopeID != scope })
}

// await polls cond until it holds, for at most Settle: drivers offer no notification of
// what they learn after the fact. state describes what was seen, for the failure.
func (h *Harness) await(t *testing.T, what string, cond func() (ok bool, state string)) {
	t.Helper()
	settle := h.Settle
	if settle <= 0 {
		settle = DefaultSettle
	}
	deadline := time.Now().Add(settle)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last seen: %s", settle, what, state)
		}
		<-tick.C
	}
}

// awaitGone waits until List no longer shows the pod and nothing else of it is left.
func (h *Harness) awaitGone(t *testing.T, ctx context.Context, scope, podID string) {
	t.Helper()
	h.await(t, "pod "+podID+" to leave List", func() (bool, string) {
		pods := h.list(t, ctx, scope)
		return !slices.ContainsFunc(pods, func(p warmpool.Pod) bool { return p.ID == podID }), fmt.Sprintf("%+v", pods)
	})
	if h.Leftovers != nil {
		h.await(t, "nothing of pod "+podID+" to be left", func() (bool, string) {
			left := h.Leftovers(t, podID)
			return len(left) == 0, strings.Join(left, ", ")
		})
	}
}

// WantError fails the test unless err is a *warmpool.Error of code whose message
// mentions contains.
func WantError(t testing.TB, err error, code warmpool.Code, contains string) {
	t.Helper()
	var e *warmpool.Error
	if !errors.As(err, &e) || e.Code != code || e.Message == "" {
		t.Fatalf("err = %v, want %s saying why", err, code)
	}
	if !strings.Contains(e.Message, contains) {
		t.Fatalf("err = %q, want it to mention %q", e.Message, contains)
	}
}

// checkURL checks that raw is an http URL with a host whose path ends in path.
func checkURL(t *testing.T, what, raw, path string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || !strings.HasSuffix(u.Path, path) {
		t.Errorf("%s URL %q, want http://host…%s", what, raw, path)
	}
}

// FirstEvent reads the first event of the SSE stream at url, its lines as sent.
func FirstEvent(t testing.TB, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("GET %s: %d %q, want 200 text/event-stream", url, resp.StatusCode, ct)
	}
	var ev strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && sc.Text() != "" {
		ev.WriteString(sc.Text() + "\n")
	}
	return ev.String()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func ids(pods []warmpool.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.ID
	}
	return out
}
