package sweeper_test

import (
	"context"
	"slices"
	"testing"

	"github.com/warmpool/warmpool"
)

// SPEC §11.3 recycle "delete": a pod whose last session or hold ends is retired (no
// new session or hold lands on it) and deleted by the next sweep, and the refill keeps
// the pool warm with fresh pods; a pod still holding a session or a hold is kept.
func TestRecycleDeleteOnLastEnd(t *testing.T) {
	h := newHarness(t)
	h.Scope("r", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.Recycle, c.Pool.MinIdlePods = warmpool.RecycleDelete, 1 })
	ctx := context.Background()

	first := h.route("r", "s1").PodID
	if second := h.route("r", "s2").PodID; second != first {
		t.Fatalf("the second session went to %s, want the first pod %s (a free slot)", second, first)
	}
	if ok, err := h.sm.End(ctx, "r", "s1"); !ok || err != nil {
		t.Fatalf("end s1: %v %v", ok, err)
	}
	if p, ok := podState(h.Check("r", false), first); !ok || p.Retired || p.Idle {
		t.Fatalf("pod with a session left = %+v, want it kept", p)
	}
	if ok, err := h.sm.End(ctx, "r", "s2"); !ok || err != nil {
		t.Fatalf("end s2: %v %v", ok, err)
	}
	if p, ok := podState(h.Check("r", true), first); !ok || !p.Retired || !p.Idle {
		t.Fatalf("pod after its last session = %+v, want it retired and idle", p)
	}
	// No new session lands on it: the next route deploys a fresh pod.
	if b := h.route("r", "s3"); b.PodID == first {
		t.Fatalf("a session landed on the retired pod %s", first)
	}
	if err := h.sw.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(h.Fake.Deleted(), first) {
		t.Fatalf("deleted %v, want the retired pod %s", h.Fake.Deleted(), first)
	}

	// A hold is a session here too: its release retires the pod.
	hold, err := h.rm.Hold(ctx, "r", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.rm.ReleaseHold(ctx, "r", hold.Pod.ID, hold.ID); err != nil {
		t.Fatal(err)
	}
	if p, ok := podState(h.Check("r", false), hold.Pod.ID); !ok || !p.Retired {
		t.Fatalf("pod after its hold's release = %+v, want it retired", p)
	}
	if err := h.sw.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(h.Fake.Deleted(), hold.Pod.ID) {
		t.Fatalf("deleted %v, want the held pod %s", h.Fake.Deleted(), hold.Pod.ID)
	}
	// The refill keeps one fresh pod warm.
	h.autoscale()
	s := h.Check("r", false)
	fresh := 0
	for _, p := range s.Pods {
		if p.Idle && !p.Retired {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("after the refill %d fresh idle pods, want 1: %+v", fresh, s.Pods)
	}
}
