package sweeper_test

import (
	"fmt"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// Issue 20 point 8: a class B change lowers max_pods from 4 to 2 while four pods hold
// two sessions each. No route deploys while the scope is over max_pods; the two pods
// beyond it (the last registered, busy) take no new session, and each is deleted by
// the due sweep as soon as it is idle, min_idle_pods 1 and pod_ttl_s notwithstanding.
// Once the scope is back at max_pods, its pods serve new sessions again and an idle one
// is kept warm. Red before the fix: the route took the idle surplus pod, and the sweep
// kept it as the min_idle_pods pod (reclaimScope and scope_due.lua knew no max_pods).
func TestLoweredMaxPodsDrainsSurplusPods(t *testing.T) {
	h := newHarness(t)
	pool := func(c *warmpool.ScopeConfig) {
		c.Pool.MinIdlePods, c.Pool.PodTTLS, c.Pool.SessionTTLS, c.Pool.QueueSize = 1, 600, 86400, 0
	}
	h.Scope("a", 8, 2, pool)
	on := map[string][]string{}
	for i := range 8 {
		b := h.route("a", fmt.Sprintf("s%d", i))
		on[b.PodID] = append(on[b.PodID], b.SessionID)
	}
	s := h.Check("a", false)
	if len(s.Pods) != 4 || h.Fake.DeployCount() != 4 {
		t.Fatalf("%d pods, %d deploys; want 4 pods of 2", len(s.Pods), h.Fake.DeployCount())
	}
	p := []string{s.Pods[0].Pod.ID, s.Pods[1].Pod.ID, s.Pods[2].Pod.ID, s.Pods[3].Pod.ID}

	h.Scope("a", 4, 2, pool) // max_pods 2
	h.Check("a", false)
	refused := func(session string) {
		t.Helper()
		_, err := h.sm.Route(t.Context(), "a", session, "")
		if warmpool.ErrorCode(err) != warmpool.CodeNoPodAvailable {
			t.Fatalf("route %s: %v, want NO_POD_AVAILABLE (the pods within max_pods are full)", session, err)
		}
		if n := h.Fake.DeployCount(); n != 4 {
			t.Fatalf("%d deploys with the scope over max_pods, want still 4", n)
		}
	}
	end := func(sessions ...string) {
		t.Helper()
		for _, sid := range sessions {
			if ok, err := h.sm.End(t.Context(), "a", sid); !ok || err != nil {
				t.Fatalf("end %s: %v %v", sid, ok, err)
			}
		}
	}
	sweep := func() redisstore.Snapshot {
		t.Helper()
		if err := h.sw.SweepShard(t.Context(), redisstore.DueShard("a")); err != nil {
			t.Fatal(err)
		}
		return h.Check("a", false)
	}
	refused("x")

	// The last pod empties: it is surplus, taken by no route, and swept at once.
	end(on[p[3]]...)
	refused("y")
	if s := sweep(); !h.deleted(p[3]) || len(s.Pods) != 3 {
		t.Fatalf("after the sweep: pods %v, deleted %v; want %s deleted as beyond max_pods", podIDs(s), h.Fake.Deleted(), p[3])
	}

	// Three pods: the last one is still surplus while it is busy, and goes once idle.
	end(on[p[2]][0])
	refused("z")
	end(on[p[2]][1])
	if s := sweep(); !h.deleted(p[2]) || len(s.Pods) != 2 {
		t.Fatalf("after the sweep: pods %v, deleted %v; want %s deleted as beyond max_pods", podIDs(s), h.Fake.Deleted(), p[2])
	}

	// Back at max_pods: a freed slot takes a new session, an idle pod is kept warm.
	end(on[p[0]][0])
	if b := h.route("a", "z"); b.PodID != p[0] {
		t.Fatalf("route z on %s, want %s", b.PodID, p[0])
	}
	end(on[p[1]]...)
	s = sweep()
	if st, ok := podState(s, p[1]); !ok || !st.Idle || h.deleted(p[1]) {
		t.Fatalf("pod %s: %+v (registered %v), want kept idle as the min_idle_pods pod", p[1], st, ok)
	}
	if len(s.Pods) != 2 || h.Fake.DeployCount() != 4 {
		t.Fatalf("pods %v, %d deploys; want %s and %s, no deploy", podIDs(s), h.Fake.DeployCount(), p[0], p[1])
	}
}
