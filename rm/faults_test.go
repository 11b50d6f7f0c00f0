package rm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/replicatest"
	"github.com/warmpool/warmpool/k8s/fakepod"
	"github.com/warmpool/warmpool/rm"
)

// A leader whose caller left while its deploy ran (a client gone, a route that gave
// up) keeps no slot: the deploy goes on for the room, and once the pod is registered
// the leader's claim goes back at once, not when the claim expires (ClaimTTL, 30s by
// default). Before, the pod stayed busy, its slot held by nobody, for the whole TTL.
func TestALeaderWhoseCallerLeftGivesItsSlotBack(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 2)
	m := manager(h, rm.Config{})
	hold := h.Fake.Hold()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "s")
		errc <- err
	}()
	h.WaitInFlight(1)
	cancel()
	if err := replicatest.Recv(t, "the acquire's answer", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire after its caller left: %v, want context.Canceled", err)
	}
	hold()
	replicatest.WaitFor(t, "the deployed pod to go idle", func() bool {
		s := h.Snap("s")
		return len(s.Pods) == 1 && s.Pods[0].Idle
	})
	s := h.Settled("s")
	if s.Pods[0].Slots != 0 || len(s.Claims) != 0 {
		t.Fatalf("pod %+v, claims %v: want no slot held", s.Pods[0], s.Claims)
	}
}

// Issue 20.7: the replica leading a cold burst's deploy dies (its Redis connection
// closed, its driver hung: it extends nothing and aborts nothing). Its followers on the
// other replica learn of it at the lease's end, not at their room's (30 s), and one of
// them deploys in its place for all three: each gets that pod, none DEPLOY_FAILED.
// Before, each got 502 DEPLOY_FAILED ("its leader is gone") while three of the four
// places of max_pods were free.
func TestFollowersOfADeadReplicaDeployInItsPlace(t *testing.T) {
	const lease = time.Second
	h := replicatest.New(t)
	// max_pods 4; a follower waits up to ready_timeout_s + FollowerMargin = 30 s.
	h.Scope("s", 16, 4, func(c *warmpool.ScopeConfig) { c.Deploy.ReadyTimeoutS = 20 })
	hung := fakepod.New()
	t.Cleanup(func() { _ = hung.Close() })
	t.Cleanup(hung.Hold())
	victim := h.Replica(replicatest.Config{RM: rm.Config{Lease: lease}, Driver: hung})
	other := h.Replica(replicatest.Config{RM: rm.Config{Lease: lease}})
	ctx := context.Background()
	watch := h.Watch("s")

	leader := burst(ctx, "s", 1, victim.RM)
	if err := hung.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	hold := h.Fake.Hold()
	defer hold()
	followers := burst(ctx, "s", 3, other.RM)
	replicatest.WaitFor(t, "three followers in the dead leader's room", func() bool { return len(h.Snap("s").Followers) == 3 })
	if err := victim.Client.Close(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	replicatest.WaitFor(t, "the followers behind one deploy in the dead leader's place", func() bool {
		s := h.Snap("s")
		return h.Fake.InFlight() == 1 && len(s.Deploys) == 1 && len(s.Followers) == 2
	})
	hold()
	outs := collect(followers, 3)
	took := time.Since(killed)
	sources, codes, pods := count(outs)
	if len(codes) != 0 || sources[warmpool.SourceDeployed] != 1 || sources[warmpool.SourceFollower] != 2 || len(pods) != 1 {
		for _, o := range outs {
			t.Log(o.err)
		}
		t.Fatalf("followers of the dead leader: sources %v, codes %v, pods %v; want one pod for all three", sources, codes, pods)
	}
	if bound := lease + 5*time.Second; took > bound {
		t.Errorf("the followers answered %v after their leader died (lease %v); want within %v", took, lease, bound)
	}
	if n := h.Fake.DeployCount(); n != 1 {
		t.Errorf("deploys in the dead leader's place = %d, want 1", n)
	}
	// The dead replica's own caller: its deploy was lost, not failed.
	o := replicatest.Recv(t, "the dead leader's answer", leader)
	if code := warmpool.ErrorCode(o.err); code != warmpool.CodeNoPodAvailable && code != warmpool.CodeStoreUnavailable {
		t.Errorf("the dead replica's leader: %v; want a 503 code", o.err)
	}
	release(t, other.RM, "s", outs)
	violations, _ := watch.Stop()
	for _, v := range violations {
		t.Error(v)
	}
	h.Settled("s")
}
