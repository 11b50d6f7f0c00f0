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
	"slices"
	"strconv"
	"strings"
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
