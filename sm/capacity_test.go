package sm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sm"
)

// onPod lists the sessions of bs bound to pod.
func onPod(bs []warmpool.Binding, pod string) []string {
	var out []string
	for _, b := range bs {
		if b.PodID == pod {
			out = append(out, b.SessionID)
		}
	}
	return out
}

func slotsOf(s redisstore.Snapshot, pod string) int {
	for _, p := range s.Pods {
		if p.Pod.ID == pod {
			return p.Slots
		}
	}
	return -1
}

func mustEnd(t *testing.T, m *sm.Manager, scope, session string) {
	t.Helper()
	if ok, err := m.End(context.Background(), scope, session); !ok || err != nil {
		t.Fatalf("end %s = %v, %v", session, ok, err)
	}
}

// Issue 20 point 8: a class B change that lowers pod_concurrency from 4 to 2 leaves two
// pods with 4 sessions each. New routes go elsewhere at once (a third pod is deployed,
// max_pods now 3, then filled to 2), and once every pod is full they queue. The
// over-full pods drain: a session ending on one frees its slot instead of handing it to
// the waiter while the pod is still at or over 2 (3 and 2 slots left), and only the
// slot freed on a pod back at the limit goes to the waiter. Red before the fix with the
// slot handed on from 4 (hand_off in lib/handoff.lua checked no pod_concurrency).
func TestLoweredPodConcurrencyDrainsOverFullPods(t *testing.T) {
	h := replicatest.New(t)
	queue := func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = 4, 30 }
	h.Scope("s", 8, 4, queue)
	m := replica(h, replicatest.Config{})
	old := fill(t, "s", "old", 8, m)
	if s := h.Check("s", false); len(s.Pods) != 2 || slotsOf(s, s.Pods[0].Pod.ID) != 4 || slotsOf(s, s.Pods[1].Pod.ID) != 4 {
		t.Fatalf("before the change: %+v, want 2 pods of 4", s.Pods)
	}
	full := map[string]bool{old[0].PodID: true}
	for _, b := range old {
		full[b.PodID] = true
	}

	h.Scope("s", 6, 2, queue) // max_pods 3
	h.Check("s", false)
	n1, n2 := mustRoute(t, m, "s", "new1"), mustRoute(t, m, "s", "new2")
	if full[n1.PodID] || n1.PodID != n2.PodID || n1.Source != warmpool.SourceDeployed {
		t.Fatalf("new routes on %s (%s) and %s; want both on a pod deployed for them, none on the over-full %v", n1.PodID, n1.Source, n2.PodID, full)
	}
	queued := routeAsync(m, "s", "new3", "")
	replicatest.WaitFor(t, "the route queued", func() bool { return len(h.Snap("s").Queue) == 1 })

	a := old[0].PodID
	ending := onPod(old, a)
	for i, want := range []int{3, 2} {
		mustEnd(t, m, "s", ending[i])
		s := h.Check("s", false)
		if got := slotsOf(s, a); got != want {
			t.Fatalf("after %d ends on the over-full pod: %d slots, want %d", i+1, got, want)
		}
		if _, bound := s.Sessions["new3"]; bound || len(s.Queue) != 1 {
			t.Fatalf("after %d ends: new3 bound %v, queue %v; a pod at or over pod_concurrency must not take it", i+1, bound, s.Queue)
		}
	}
	mustEnd(t, m, "s", ending[2])
	r := replicatest.Recv(t, "the queued route", queued)
	if r.err != nil || r.b.PodID != a {
		t.Fatalf("queued route = %+v, %v; want the slot freed on %s, back at the limit", r.b, r.err, a)
	}
	if got := slotsOf(h.Check("s", false), a); got != 2 {
		t.Fatalf("pod %s: %d slots after the hand-off, want 2", a, got)
	}

	// The other over-full pod drains as its sessions end, and fills to 2 again, no more.
	b := ""
	for pod := range full {
		if pod != a {
			b = pod
		}
	}
	for _, sid := range onPod(old, b) {
		mustEnd(t, m, "s", sid)
	}
	for i := range 2 {
		if got := mustRoute(t, m, "s", fmt.Sprintf("refill%d", i)); got.PodID != b {
			t.Fatalf("refill%d on %s, want the drained %s", i, got.PodID, b)
		}
	}
	s := h.Check("s", false)
	for _, p := range s.Pods {
		if p.Slots > 2 {
			t.Fatalf("pod %s: %d slots once drained, want at most 2", p.Pod.ID, p.Slots)
		}
	}
}

// Issue 20 point 8: a class B change that raises the limits gives their room at once.
// Two pods of one session are full and a route waits in the queue; pod_concurrency 1 →
// 2 serves the waiter on one of the two pods (its next pass finds the free slot) and
// then a new route on the other, with no deploy.
func TestRaisedCapacityServesAtOnce(t *testing.T) {
	h := replicatest.New(t)
	queue := func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = 2, 30 }
	h.Scope("s", 2, 1, queue)
	m := replica(h, replicatest.Config{})
	old := fill(t, "s", "old", 2, m)
	queued := routeAsync(m, "s", "waiting", "")
	replicatest.WaitFor(t, "the route queued", func() bool { return len(h.Snap("s").Queue) == 1 })

	h.Scope("s", 4, 2, queue)
	r := replicatest.Recv(t, "the queued route", queued)
	if r.err != nil || (r.b.PodID != old[0].PodID && r.b.PodID != old[1].PodID) {
		t.Fatalf("queued route = %+v, %v; want a slot of an existing pod", r.b, r.err)
	}
	b := mustRoute(t, m, "s", "new")
	if b.PodID == r.b.PodID || (b.PodID != old[0].PodID && b.PodID != old[1].PodID) {
		t.Fatalf("new route on %s; want the other existing pod", b.PodID)
	}
	if n := h.Fake.DeployCount(); n != 2 {
		t.Fatalf("%d deploys, want still 2", n)
	}
	for _, p := range h.Check("s", false).Pods {
		if p.Slots != 2 {
			t.Fatalf("pod %s has %d slots, want 2", p.Pod.ID, p.Slots)
		}
	}
}
