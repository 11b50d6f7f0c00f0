package rm_test

import (
	"context"
	"testing"

	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/rm"
)

// Issue 20 point 8: a deploy in flight has its leader and three followers (room of
// pod_concurrency 4 - 1) when a class B change lowers pod_concurrency to 2 (max_pods 3).
// Its pod registers with two slots taken, the leader's and the first follower's; the
// other two followers learn that no slot was left for them and acquire again under the
// new limits: they lead a deploy, or follow the one the other leads. Four callers, no
// error, no pod with more than two. Red before the fix with every follower given a slot
// (pod_register.lua counted no pod_concurrency for the room).
func TestFollowersOverALoweredLimitAcquireAgain(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 4)
	a, b := manager(h, rm.Config{}), manager(h, rm.Config{})
	hold := h.Fake.Hold()
	ch := burst(context.Background(), "s", 4, a, b)
	h.WaitInFlight(1)
	replicatest.WaitFor(t, "three followers in the room", func() bool { return len(h.Snap("s").Followers) == 3 })
	h.Scope("s", 6, 2)
	hold()
	outs := collect(ch, 4)
	_, codes, pods := count(outs)
	if len(codes) != 0 {
		for _, o := range outs {
			if o.err != nil {
				t.Log(o.err)
			}
		}
		t.Fatalf("errors: %v", codes)
	}
	first := h.Fake.Deploys()[0].Pod.ID
	if pods[first] != 2 {
		t.Fatalf("callers on pods %v; want 2 on the first pod %s, the leader and one follower", pods, first)
	}
	for pod, n := range pods {
		if n > 2 {
			t.Fatalf("pod %s handed to %d callers > pod_concurrency 2", pod, n)
		}
	}
	if d := h.Fake.DeployCount(); d < 2 || d > 3 {
		t.Fatalf("%d deploys; want the first and one or two for the followers that acquired again", d)
	}
	s := h.Check("s", false)
	for _, p := range s.Pods {
		if p.Slots != pods[p.Pod.ID] {
			t.Fatalf("pod %s has %d slots, %d callers hold it", p.Pod.ID, p.Slots, pods[p.Pod.ID])
		}
	}
	release(t, a, "s", outs)
	h.Settled("s")
}
