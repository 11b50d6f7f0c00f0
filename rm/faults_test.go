package rm_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
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
	hung := fake.New()
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

// lostAnswers is a go-redis hook: the first calls of one script (all of them, with a
// negative count) run in Redis, then fail as if their answers never came (a timeout
// after Redis ran them).
type lostAnswers struct {
	name string
	left *atomic.Int64
}

func (lostAnswers) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h lostAnswers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if err == nil && len(args) > 1 && (args[1] == redisstore.Scripts[h.name].Hash() || args[1] == redisstore.Sources[h.name]) && h.left.Add(-1) >= 0 {
			err = errors.New("i/o timeout (injected once Redis ran the call)")
			cmd.SetErr(err)
		}
		return err
	}
}

func (lostAnswers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Issue 20.7: a register whose answer never came (Redis ran it, the reply was lost) is
// tried again while the lease holds, and the try that finds the pod committed answers
// ok; a leader whose every try goes unanswered until its lease is gone (the register
// took it out) asks Redis whether the pod is in the pool before deleting it, and keeps
// it. Either way leader and follower get the pod. Before, the first unanswered try
// made the leader answer 502 DEPLOY_FAILED and delete the pod, which Redis had
// registered and handed to the follower.
func TestRegisterWhoseAnswerIsLostKeepsThePod(t *testing.T) {
	for _, tc := range []struct {
		name string
		lost int64 // answers lost; -1: all
	}{{"first answer lost", 1}, {"every answer lost", -1}} {
		t.Run(strings.ReplaceAll(tc.name, " ", "_"), func(t *testing.T) {
			h := replicatest.New(t)
			h.Scope("s", 4, 2) // max_pods 2, two sessions a pod
			rep := h.Replica(replicatest.Config{RM: rm.Config{Lease: 300 * time.Millisecond}})
			left := &atomic.Int64{}
			left.Store(tc.lost)
			if tc.lost < 0 {
				left.Store(math.MaxInt64)
			}
			rep.Client.AddHook(lostAnswers{name: "pod_register.lua", left: left})
			ctx := context.Background()
			hold := h.Fake.Hold()
			defer hold()
			ch := burst(ctx, "s", 2, rep.RM)
			h.WaitInFlight(1)
			replicatest.WaitFor(t, "the follower in the room", func() bool { return len(h.Snap("s").Followers) == 1 })
			hold()
			outs := collect(ch, 2)
			sources, codes, pods := count(outs)
			if len(codes) != 0 || sources[warmpool.SourceDeployed] != 1 || sources[warmpool.SourceFollower] != 1 || len(pods) != 1 {
				for _, o := range outs {
					t.Log(o.err)
				}
				t.Fatalf("sources %v, codes %v, pods %v; want one pod for leader and follower", sources, codes, pods)
			}
			if deleted := h.Fake.Deleted(); len(deleted) != 0 {
				t.Fatalf("the driver deleted %v, a pod Redis had registered", deleted)
			}
			release(t, rep.RM, "s", outs)
			h.Settled("s")
		})
	}
}
