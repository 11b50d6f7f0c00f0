package sweeper_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
)

// SPEC §11.3 max_sessions_per_pod: a pod that has served that many sessions takes no
// new one, keeps those it has, and is deleted once empty; the refill keeps the pool
// warm with fresh pods. A hold counts as a session.
func TestMaxSessionsPerPodRetiresAfterN(t *testing.T) {
	h := newHarness(t)
	h.Scope("m", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.MaxSessionsPerPod, c.Pool.MinIdlePods = 3, 1 })
	ctx := context.Background()
	if n := h.autoscale(); n != 1 {
		t.Fatalf("autoscale started %d deploys, want 1", n)
	}
	first := h.route("m", "s1")
	if first.Source != warmpool.SourceWarm {
		t.Fatalf("first route source %q, want warm", first.Source)
	}
	if b := h.route("m", "s2"); b.PodID != first.PodID {
		t.Fatalf("s2 went to %s, want the first pod %s (a free slot)", b.PodID, first.PodID)
	}
	if ok, err := h.sm.End(ctx, "m", "s1"); !ok || err != nil {
		t.Fatalf("end s1: %v %v", ok, err)
	}
	// The third session is the pod's last: it is retired as it takes it.
	if b := h.route("m", "s3"); b.PodID != first.PodID {
		t.Fatalf("s3 went to %s, want the first pod %s (its third session)", b.PodID, first.PodID)
	}
	if p, ok := podState(h.Check("m", false), first.PodID); !ok || !p.Retired || p.Served != 3 {
		t.Fatalf("pod after its third session = %+v, want it retired with 3 served", p)
	}
	if ok, err := h.sm.End(ctx, "m", "s2"); !ok || err != nil {
		t.Fatalf("end s2: %v %v", ok, err)
	}
	// A free slot on it takes no new session.
	if b := h.route("m", "s4"); b.PodID == first.PodID {
		t.Fatalf("s4 landed on pod %s, which served its 3 sessions", first.PodID)
	}
	if ok, err := h.sm.End(ctx, "m", "s3"); !ok || err != nil {
		t.Fatalf("end s3: %v %v", ok, err)
	}
	if err := h.sw.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.deleted(first.PodID) {
		t.Fatalf("deleted %v, want the spent pod %s once empty", h.Fake.Deleted(), first.PodID)
	}
	h.autoscale()
	fresh := 0
	for _, p := range h.Check("m", false).Pods {
		if p.Idle && !p.Retired {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("after the refill %d fresh idle pods, want 1", fresh)
	}

	// A hold is a session here too: a pod of one session is spent by one hold.
	h.Scope("m", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.MaxSessionsPerPod, c.Pool.MinIdlePods = 1, 1 })
	hold, err := h.rm.Hold(ctx, "m", "")
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := podState(h.Check("m", false), hold.Pod.ID); !ok || !p.Retired {
		t.Fatalf("pod under its one hold = %+v, want it retired", p)
	}
	if _, err := h.rm.ReleaseHold(ctx, "m", hold.Pod.ID, hold.ID); err != nil {
		t.Fatal(err)
	}
	if err := h.sw.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.deleted(hold.Pod.ID) {
		t.Fatalf("deleted %v, want the held pod %s", h.Fake.Deleted(), hold.Pod.ID)
	}
}

// rolloutScope publishes scope "r" with two warm pods of its first image, one session
// on one of them, then a new image under rollout, with the new version's deploys
// held in the driver (all of them in flight there); it returns the release of the hold, the old pods and their
// deploy_ver.
func rolloutScope(t *testing.T, h *harness, rollout string) (release func(), old []string, oldVer string) {
	t.Helper()
	mutate := func(image string) func(*warmpool.ScopeConfig) {
		return func(c *warmpool.ScopeConfig) {
			c.Deploy.Image, c.Pool.MinIdlePods, c.Pool.Rollout = image, 2, rollout
		}
	}
	h.Scope("r", 8, 2, mutate("agent:1"))
	if n := h.autoscale(); n != 2 {
		t.Fatalf("autoscale started %d deploys, want 2", n)
	}
	if b := h.route("r", "s1"); b.Source != warmpool.SourceWarm {
		t.Fatalf("route before the update: source %q, want warm", b.Source)
	}
	old, oldVer = podIDs(h.Snap("r")), h.Current("r").DeployVer
	h.Scope("r", 8, 2, mutate("agent:2"))
	release = h.Fake.Hold()
	t.Cleanup(release)
	before := h.observedCount("autoscale_deploy")
	if err := h.sw.Autoscale(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The new version's deploys reach the driver from goroutines of their own: a
	// count read before the last of them arrived would blame it on the caller's routes.
	if err := h.Fake.WaitInFlight(t.Context(), h.observedCount("autoscale_deploy")-before); err != nil {
		t.Fatal(err)
	}
	return release, old, oldVer
}

// SPEC §11.3 rollout "prewarm": after an image update, new sessions go on to the old
// version's pods (a free slot, then a warm one) while max(1, min_idle_pods) pods of
// the new one deploy: no route deploys cold. Once they are Ready the scope switches,
// and the old pods drain as under "drain".
func TestPrewarmKeepsRoutesWarm(t *testing.T) {
	h := newHarness(t)
	release, old, _ := rolloutScope(t, h, warmpool.RolloutPrewarm)
	deploys := h.Fake.DeployCount()
	for _, s := range []string{"s2", "s3"} {
		b := h.route("r", s)
		if b.Source != warmpool.SourceWarm || !slices.Contains(old, b.PodID) {
			t.Fatalf("route %s during the prewarm = %s on %s, want warm on an old pod %v", s, b.Source, b.PodID, old)
		}
	}
	if n := h.Fake.DeployCount(); n != deploys {
		t.Fatalf("routes during the prewarm started %d deploys, want none", n-deploys)
	}
	release()
	h.waitDeploys()
	if p := h.Snap("r").Prewarm; p.Ver != "" {
		t.Fatalf("prewarm after the new pods registered = %+v, want it over", p)
	}
	b := h.route("r", "s4")
	if b.Source != warmpool.SourceWarm || slices.Contains(old, b.PodID) {
		t.Fatalf("route after the switch = %s on %s, want warm on a new pod", b.Source, b.PodID)
	}
	ctx := context.Background()
	if ok, err := h.sm.End(ctx, "r", "s3"); !ok || err != nil {
		t.Fatalf("end s3: %v %v", ok, err)
	}
	if err := h.sw.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range h.Snap("r").Pods {
		if slices.Contains(old, p.Pod.ID) && p.Idle {
			t.Fatalf("old pod %s idle after the switch and the reclaim, want it deleted", p.Pod.ID)
		}
	}
}

// Under rollout "drain" (the default) nothing changes: the first route after the
// update that needs a new slot waits for a new version's pod.
func TestDrainRoutesToTheNewVersionAtOnce(t *testing.T) {
	h := newHarness(t)
	release, old, _ := rolloutScope(t, h, warmpool.RolloutDrain)
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, err := h.sm.Route(context.Background(), "r", "s2", "")
		if err != nil || slices.Contains(old, b.PodID) {
			t.Errorf("route after the update = %+v, %v; want a new version's pod", b, err)
		}
	}()
	replicatest.WaitFor(t, "the route to wait for the new version's pods", func() bool { return len(h.Snap("r").Followers) > 0 })
	release()
	<-done
}

// A prewarm ends ready_timeout_s after the change even when no new pod got Ready:
// routes then go to the new version, and the old idle pods are deleted.
func TestPrewarmEndsAtReadyTimeout(t *testing.T) {
	h := newHarness(t)
	_, old, oldVer := rolloutScope(t, h, warmpool.RolloutPrewarm)
	stored := h.Current("r")
	p := h.Snap("r").Prewarm
	want := stored.UpdatedAt.Add(time.Duration(stored.Config.Deploy.ReadyTimeoutS) * time.Second)
	if !p.Until.Equal(want.Truncate(time.Millisecond)) || p.Ver != oldVer {
		t.Fatalf("prewarm = %+v, want one of the old version until %v", p, want)
	}
	h.Clock.Advance(want.Sub(h.Clock.Now()))
	if err := h.sw.Reclaim(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range h.Snap("r").Pods {
		if slices.Contains(old, p.Pod.ID) && p.Idle {
			t.Fatalf("old pod %s idle after the prewarm's end and the reclaim, want it deleted", p.Pod.ID)
		}
	}
}
