package sweeper_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// reclaimedLongAgo reclaims a registered pod as a due job does (purged, its
// tombstone set, deleted from the driver) and lets its tombstone expire.
func (h *harness) reclaimedLongAgo(pod warmpool.Pod) {
	h.t.Helper()
	ctx := context.Background()
	if _, err := h.Store.PodPurge(ctx, pod.ScopeID, pod.ID, "reclaimed", nil); err != nil {
		h.t.Fatal(err)
	}
	if err := h.Fake.Delete(ctx, pod); err != nil {
		h.t.Fatal(err)
	}
	if err := h.Redis.Client.Del(ctx, h.Store.Keys().Scope(pod.ScopeID).Gone(pod.ID)).Err(); err != nil {
		h.t.Fatal(err)
	}
}

// The paced pass never adopts a pod from a list older than the pod's tombstone can
// vouch for. It lists the driver once and visits the scopes over minutes: a pod
// reclaimed after the list (purged, its tombstone set, deleted from the driver) whose
// tombstone has expired by the visit of its scope was adopted as a ready orphan
// before, and took sessions on a pod that no longer exists. The pass lists the driver
// again instead, and adopts the orphans that are still there.
func TestPacedPassDoesNotAdoptFromAnOldList(t *testing.T) {
	var drv *listingDriver
	h := newHarness(t, func(o *options) {
		o.sweep.PassDuty = 0.5
		o.driver = func(f *fake.Driver) warmpool.PodDriver { drv = &listingDriver{Driver: f}; return drv }
	})
	h.Scope("a", 2, 1)
	h.Scope("b", 2, 1)
	pod := h.addPod("b", "p1", 1)
	h.Fake.AddExternal(h.externalPod("b", "orphan", 2))
	ctx := t.Context()
	var once sync.Once
	reclaim := func() {
		// After the pass's list, before its visit of b: the pod is reclaimed, and its
		// tombstone has expired by the visit.
		h.reclaimedLongAgo(pod)
		h.Clock.Advance(redisstore.GoneTTL + time.Second)
	}
	sweeper.SetPace(h.sw, time.Now, func(context.Context, time.Duration) error {
		if drv.lists.Load() > 0 {
			once.Do(reclaim)
		}
		return nil
	})
	if err := h.sw.ReconcileJob().Run(ctx); err != nil {
		t.Fatal(err)
	}
	if drv.lists.Load() == 0 {
		t.Fatal("the pass did not list the driver")
	}
	if _, ok := podState(h.Snap("b"), pod.ID); ok {
		t.Fatalf("the pass adopted %s, deleted from the driver after its list", pod.ID)
	}
	if p, ok := podState(h.Snap("b"), "orphan"); !ok || !p.Idle || h.observedCount("adopted") != 1 {
		t.Fatalf("the orphan still in the driver: %+v %v (adopted %d); want it adopted from the fresh list", p, ok, h.observedCount("adopted"))
	}
	if n := drv.lists.Load(); n != 2 {
		t.Fatalf("the driver listed %d times, want twice: once at the start, once when the list was too old", n)
	}
}

// The watch judges orphans by the same rule: a watch interval longer than the tombstone
// does not make its shared list one to adopt from. A ready orphan listed (within its
// grace), adopted and reclaimed by another replica since, its tombstone expired, is not
// adopted back from the list of before; the watch lists again and forgets it. Before,
// the shards shared the list for the whole watch interval (here 10 minutes). The
// driver reports no events, so the list is all the watch knows.
func TestWatchDoesNotAdoptFromAnOldList(t *testing.T) {
	h := newHarness(t, func(o *options) {
		o.sweep.Watch = 10 * time.Minute
		o.driver = func(f *fake.Driver) warmpool.PodDriver { return silentDriver{f} }
	})
	h.Scope("a", 2, 1)
	ctx := t.Context()
	h.Fake.AddExternal(h.externalPod("a", "o1", 1))
	shard := redisstore.DueShard("a")
	if err := h.sw.WatchShard(ctx, shard); err != nil { // lists o1, within its grace
		t.Fatal(err)
	}
	pod := h.driverPod("o1")
	if st, err := h.Store.PodAdopt(ctx, pod, h.Clock.Now(), false); err != nil || st != redisstore.AdoptAdopted {
		t.Fatalf("adopt: %q %v", st, err)
	}
	h.reclaimedLongAgo(pod)
	h.Clock.Advance(redisstore.GoneTTL + time.Second) // past the grace of o1, created on the clock
	if err := h.sw.WatchShard(ctx, shard); err != nil {
		t.Fatal(err)
	}
	if _, ok := podState(h.Snap("a"), pod.ID); ok || h.observedCount("adopted") != 0 {
		t.Fatalf("the watch adopted %s, deleted from the driver after its list", pod.ID)
	}
}
