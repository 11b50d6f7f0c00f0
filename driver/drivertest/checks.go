package drivertest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
)

// checkLifecycle: a deploy returns a Ready pod carrying the request's scope, deploy_ver
// and fence with SSE and health URLs, having reported its phases in order (create
// first, ready last); Probe passes and List shows the same pod; Delete removes it, its
// probe then fails, and a second Delete is no error. A driver that reports pod events
// (warmpool.PodNotifier) reports the pod ready, then gone.
func checkLifecycle(t *testing.T, h *Harness) {
	ctx := testCtx(t)
	events := recordEvents(h.Driver)
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
	events.await(t, h, "an event of the ready pod", func(ev warmpool.PodEvent) bool {
		return ev.Pod == pod && !ev.Gone
	})

	if err := h.Driver.Delete(ctx, pod); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	h.awaitGone(t, ctx, req.ScopeID, pod.ID)
	events.await(t, h, "an event of the deleted pod, gone", func(ev warmpool.PodEvent) bool {
		return ev.Pod.ID == pod.ID && ev.Gone && ev.Pod.Dead != "" && !ev.Pod.Ready && ev.Pod.ScopeID == pod.ScopeID
	})
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
// (warmpool.PodNotifier) reports it dead and not Ready.
func checkDeadPod(t *testing.T, h *Harness) {
	if h.Kill == nil {
		t.Fatal("the harness cannot kill a pod (Harness.Kill)")
	}
	ctx := testCtx(t)
	events := recordEvents(h.Driver)
	pod, err := h.Driver.Deploy(ctx, h.request(t, "dt_dead", 1))
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	h.Kill(t, pod)
	events.await(t, h, "an event of the killed pod, dead", func(ev warmpool.PodEvent) bool {
		if ev.Pod.ID != pod.ID || ev.Pod.Dead == "" {
			return false
		}
		if ev.Pod.Ready || ev.Pod.ScopeID != pod.ScopeID {
			t.Fatalf("event %+v of the killed pod, want it dead, not Ready, of scope %s", ev, pod.ScopeID)
		}
		return true
	})
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

// checkURL checks that raw is an http URL with a host whose path ends in path.
func checkURL(t *testing.T, what, raw, path string) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" || u.Host == "" || !strings.HasSuffix(u.Path, path) {
		t.Errorf("%s URL %q, want http://host…%s", what, raw, path)
	}
}

// podEvents records the events of a driver that reports them (warmpool.PodNotifier).
type podEvents struct {
	notifies bool
	mu       sync.Mutex
	seen     []warmpool.PodEvent
}

func recordEvents(d warmpool.PodDriver) *podEvents {
	e := &podEvents{}
	if n, ok := d.(warmpool.PodNotifier); ok {
		e.notifies = true
		n.OnPodEvent(func(ev warmpool.PodEvent) { e.mu.Lock(); e.seen = append(e.seen, ev); e.mu.Unlock() })
	}
	return e
}

// await waits until an event recorded matches, for a driver that reports events.
func (e *podEvents) await(t *testing.T, h *Harness, what string, match func(warmpool.PodEvent) bool) {
	t.Helper()
	if !e.notifies {
		return
	}
	h.await(t, what, func() (bool, string) {
		e.mu.Lock()
		defer e.mu.Unlock()
		if slices.ContainsFunc(e.seen, match) {
			return true, ""
		}
		return false, fmt.Sprintf("events %+v", e.seen)
	})
}
