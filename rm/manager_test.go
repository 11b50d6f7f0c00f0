package rm_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/rm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// manager starts a replica on the harness and returns its resource manager.
func manager(h *replicatest.Harness, cfg rm.Config) *rm.Manager {
	return h.Replica(replicatest.Config{RM: cfg}).RM
}

type outcome struct {
	lease warmpool.Lease
	err   error
}

// burst starts n acquires of scope at once, alternating between the managers; each
// outcome arrives on the channel as it happens.
func burst(ctx context.Context, scope string, n int, ms ...*rm.Manager) <-chan outcome {
	out := make(chan outcome, n)
	for i := range n {
		go func() {
			l, err := ms[i%len(ms)].Acquire(ctx, scope)
			out <- outcome{l, err}
		}()
	}
	return out
}

// collect takes n outcomes from a burst.
func collect(ch <-chan outcome, n int) []outcome {
	out := make([]outcome, 0, n)
	for range n {
		out = append(out, <-ch)
	}
	return out
}

func count(outs []outcome) (sources map[string]int, codes map[warmpool.Code]int, pods map[string]int) {
	sources, codes, pods = map[string]int{}, map[warmpool.Code]int{}, map[string]int{}
	for _, o := range outs {
		if o.err != nil {
			codes[warmpool.ErrorCode(o.err)]++
			continue
		}
		sources[o.lease.Source]++
		pods[o.lease.Pod.ID]++
	}
	return
}

// release gives back every claim handed out, as callers that are done do.
func release(t *testing.T, m *rm.Manager, scope string, outs []outcome) {
	t.Helper()
	for _, o := range outs {
		if o.err == nil {
			if err := m.ReleaseClaim(context.Background(), scope, o.lease.Claim); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Reference case 4 and SPEC §7: a cold burst of N <= max_concurrency routes across two
// replicas causes exactly ceil(N/pc) deploys, side by side, and all N get a pod.
func TestColdBurstDeploysCeilNOverPC(t *testing.T) {
	for _, tc := range []struct{ n, mc, pc, deploys int }{
		{2, 8, 2, 1}, {8, 8, 2, 4}, {7, 8, 2, 4}, {9, 9, 3, 3}, {5, 5, 1, 5},
	} {
		t.Run(fmt.Sprintf("n%d_pc%d", tc.n, tc.pc), func(t *testing.T) {
			h := replicatest.New(t)
			h.Scope("s", tc.mc, tc.pc)
			a, b := manager(h, rm.Config{}), manager(h, rm.Config{})
			hold := h.Fake.Hold()
			ch := burst(context.Background(), "s", tc.n, a, b)
			// Every request has its place (leader or follower) and every deploy is in
			// flight before any finishes: the burst never waits on a pod to decide
			// how many to deploy.
			h.WaitInFlight(tc.deploys)
			replicatest.WaitFor(t, "every follower in a room", func() bool { return len(h.Snap("s").Followers) == tc.n-tc.deploys })
			hold()
			outs := collect(ch, tc.n)
			sources, codes, pods := count(outs)
			if len(codes) != 0 {
				for _, o := range outs {
					if o.err != nil {
						t.Log(o.err)
					}
				}
				t.Fatalf("errors: %v", codes)
			}
			if got := h.Fake.DeployCount(); got != tc.deploys {
				t.Fatalf("deploys = %d, want %d", got, tc.deploys)
			}
			if sources[warmpool.SourceDeployed] != tc.deploys || sources[warmpool.SourceFollower] != tc.n-tc.deploys {
				t.Fatalf("sources = %v", sources)
			}
			for pod, n := range pods {
				if n > tc.pc {
					t.Fatalf("pod %s handed to %d callers > pc %d", pod, n, tc.pc)
				}
			}
			s := h.Snap("s")
			for _, p := range s.Pods {
				if p.Slots != pods[p.Pod.ID] {
					t.Fatalf("pod %s has %d slots, %d callers hold it", p.Pod.ID, p.Slots, pods[p.Pod.ID])
				}
			}
			release(t, a, "s", outs)
			h.Settled("s")
		})
	}
}

// Reference case 13 with max_parallel_deploys 1: one deploy, pc-1 followers, the rest
// fail fast with NO_POD_AVAILABLE.
func TestOneDeployAtATimeOverflowFailsFast(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 2, func(c *warmpool.ScopeConfig) { c.Pool.MaxParallelDeploys = 1 })
	a, b := manager(h, rm.Config{}), manager(h, rm.Config{})
	hold := h.Fake.Hold()
	ch := burst(context.Background(), "s", 4, a, b)
	// The two requests that found no room fail while the deploy is still held.
	early := collect(ch, 2)
	if _, codes, _ := count(early); codes[warmpool.CodeNoPodAvailable] != 2 {
		t.Fatalf("while the deploy is held: %v, want 2 NO_POD_AVAILABLE", codes)
	}
	hold()
	outs := append(early, collect(ch, 2)...)
	sources, codes, pods := count(outs)
	if codes[warmpool.CodeNoPodAvailable] != 2 || sources[warmpool.SourceDeployed] != 1 || sources[warmpool.SourceFollower] != 1 {
		t.Fatalf("sources %v codes %v, want 1 deployed + 1 follower + 2 NO_POD_AVAILABLE", sources, codes)
	}
	if len(pods) != 1 || h.Fake.DeployCount() != 1 {
		t.Fatalf("pods %v deploys %d, want one", pods, h.Fake.DeployCount())
	}
	for _, o := range outs {
		var e *warmpool.Error
		if errors.As(o.err, &e) && e.RetryAfter < 1 {
			t.Fatalf("NO_POD_AVAILABLE without retry_after: %v", e)
		}
	}
	release(t, a, "s", outs)
	h.Settled("s")
}

// Reference case 5: a request that finds a warm pod takes it without deploying, even
// while another deploy of the scope is in flight.
func TestWarmPodIsTakenWithoutDeploying(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 2)
	a, b := manager(h, rm.Config{}), manager(h, rm.Config{})
	ctx := context.Background()
	first, err := a.Acquire(ctx, "s")
	if err != nil || first.Source != warmpool.SourceDeployed {
		t.Fatalf("first acquire = %+v, %v", first, err)
	}
	if err := a.ReleaseClaim(ctx, "s", first.Claim); err != nil {
		t.Fatal(err)
	}
	second, err := b.Acquire(ctx, "s")
	if err != nil || second.Source != warmpool.SourceWarm || second.Pod.ID != first.Pod.ID {
		t.Fatalf("second acquire = %+v, %v; want the warm pod %s", second, err, first.Pod.ID)
	}
	if h.Fake.DeployCount() != 1 {
		t.Fatalf("deploys = %d, want 1", h.Fake.DeployCount())
	}
	if err := b.ReleaseClaim(ctx, "s", second.Claim); err != nil {
		t.Fatal(err)
	}
	h.Settled("s")
}

// Reference case 14 and SPEC §7: a failing leader does not hand its work to its
// followers; they fail fast and every lease and room entry is cleared.
func TestFailingLeaderFailsItsFollowers(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 2, 2) // max_pods 1: the follower cannot lead a deploy of its own
	a, b := manager(h, rm.Config{}), manager(h, rm.Config{})
	h.Fake.FailNext(1, "image pull failed: no such image")
	hold := h.Fake.Hold()
	ch := burst(context.Background(), "s", 2, a, b)
	h.WaitInFlight(1)
	replicatest.WaitFor(t, "the follower in the room", func() bool { return len(h.Snap("s").Followers) == 1 })
	hold()
	outs := collect(ch, 2)
	_, codes, _ := count(outs)
	if codes[warmpool.CodeDeployFailed] != 2 {
		t.Fatalf("codes = %v, want 2 DEPLOY_FAILED", codes)
	}
	for _, o := range outs {
		if !contains(o.err.Error(), "no such image") {
			t.Fatalf("error %q does not say why", o.err)
		}
	}
	if h.Fake.DeployCount() != 1 {
		t.Fatalf("deploys = %d: a follower took the failed work over", h.Fake.DeployCount())
	}
	h.Settled("s")
}

// A crashed leader (it took a lease and vanished) and a crashed follower leave entries
// that expire by their deadlines and do not block new deploys.
func TestCrashLeftoversExpire(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 2, 2) // max_pods 1
	m := manager(h, rm.Config{Clock: h.Clock, Lease: 3 * time.Second})
	ctx := context.Background()
	now := h.Clock.Now()
	// A replica takes the only deploy lease and a place in its room, then dies.
	for _, c := range []string{"dead-leader", "dead-follower"} {
		if _, err := h.Store.PodAcquire(ctx, "s", redisstore.AcquireArgs{Now: now, Claim: c, ClaimDeadline: now.Add(time.Minute), LeaseDeadline: now.Add(3 * time.Second), RoomMargin: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.Acquire(ctx, "s"); warmpool.ErrorCode(err) != warmpool.CodeNoPodAvailable {
		t.Fatalf("acquire while the dead lease lives: %v, want NO_POD_AVAILABLE", err)
	}
	h.Clock.Advance(3 * time.Second)
	l, err := m.Acquire(ctx, "s")
	if err != nil || l.Source != warmpool.SourceDeployed {
		t.Fatalf("acquire after the dead lease expired = %+v, %v; want a new deploy", l, err)
	}
	s := h.Snap("s")
	if len(s.Deploys) != 0 || len(s.Followers) != 0 {
		t.Fatalf("leftovers: deploys %v followers %v", s.Deploys, s.Followers)
	}
	if err := m.ReleaseClaim(ctx, "s", l.Claim); err != nil {
		t.Fatal(err)
	}
	// The dead follower's note expires with its deadline too.
	h.Clock.Advance(time.Minute)
	if _, err := m.Acquire(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	if s := h.Snap("s"); len(s.ClaimPod) != 1 {
		t.Fatalf("claim notes left: %v", s.ClaimPod)
	}
}

// A follower whose leader died (its lease expired, with room below max_pods) does not
// wait out its room and does not fail: at the lease's end it deploys in its place
// (issue 20.7). Before, it failed with DEPLOY_FAILED ("its leader is gone").
func TestFollowerOfADeadLeaderDeploysInItsPlace(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 2, 2) // max_pods 1: the dead leader's lease holds the only place
	m := manager(h, rm.Config{Clock: h.Clock, Lease: 3 * time.Second})
	now := h.Clock.Now()
	if _, err := h.Store.PodAcquire(context.Background(), "s", redisstore.AcquireArgs{Now: now, Claim: "dead", ClaimDeadline: now.Add(time.Minute), LeaseDeadline: now.Add(3 * time.Second), RoomMargin: time.Second}); err != nil {
		t.Fatal(err)
	}
	ch := burst(context.Background(), "s", 1, m)
	replicatest.WaitFor(t, "the follower in the room", func() bool { return len(h.Snap("s").Followers) == 1 })
	h.Clock.Advance(3 * time.Second)
	o := replicatest.Recv(t, "the follower's answer", ch)
	if o.err != nil || o.lease.Source != warmpool.SourceDeployed {
		t.Fatalf("follower of a dead leader: %+v, %v; want a pod it deployed itself", o.lease, o.err)
	}
	if h.Fake.DeployCount() != 1 {
		t.Fatalf("deploys = %d, want the one in the dead leader's place", h.Fake.DeployCount())
	}
	release(t, m, "s", []outcome{o})
	h.Settled("s")
}

// A follower whose deploys keep being lost tries again a bounded number of times, then
// answers 503 NO_POD_AVAILABLE with Retry-After, never DEPLOY_FAILED, and leaves
// nothing behind.
func TestFollowerOfLostDeploysGivesUpWithRetryAfter(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 2) // max_pods 4
	m := manager(h, rm.Config{Clock: h.Clock})
	ctx := context.Background()
	now := h.Clock.Now()
	// Three leaders that took a lease each, one second apart, and died. Each room is
	// filled while the next leader takes its lease, then left again.
	var deploys []string
	var fillers [][2]string
	for i := range 3 {
		acquire := func(claim string) redisstore.AcquireResult {
			res, err := h.Store.PodAcquire(ctx, "s", redisstore.AcquireArgs{Now: now, Claim: claim, ClaimDeadline: now.Add(time.Minute),
				LeaseDeadline: now.Add(time.Duration(i+1) * time.Second), RoomMargin: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		if res := acquire(fmt.Sprintf("dead%d", i)); res.Kind != redisstore.AcquireDeploy {
			t.Fatalf("dead leader %d: %+v", i, res)
		} else {
			deploys = append(deploys, res.Deploy)
		}
		filler := fmt.Sprintf("filler%d", i)
		if res := acquire(filler); res.Kind != redisstore.AcquireFollower {
			t.Fatalf("filler %d: %+v", i, res)
		} else {
			fillers = append(fillers, [2]string{res.Room, filler})
		}
	}
	for _, f := range fillers {
		if err := h.Store.FollowerLeave(ctx, "s", f[0], f[1], now); err != nil {
			t.Fatal(err)
		}
	}
	hold := h.Fake.Hold() // a deploy of the follower's own would be a fourth
	defer hold()
	ch := burst(ctx, "s", 1, m)
	for _, d := range deploys {
		replicatest.WaitFor(t, "the follower in the room of "+d, func() bool {
			for f := range h.Snap("s").Followers {
				if strings.HasPrefix(f, d+"|") {
					return true
				}
			}
			return false
		})
		h.Clock.Advance(time.Second)
	}
	o := replicatest.Recv(t, "the follower's answer", ch)
	var e *warmpool.Error
	if !errors.As(o.err, &e) || e.Code != warmpool.CodeNoPodAvailable || e.RetryAfter < 1 || !contains(e.Message, "leader is gone") {
		t.Fatalf("follower of three lost deploys: %+v, %v; want NO_POD_AVAILABLE with retry_after, naming the lost leader", o.lease, o.err)
	}
	if h.Fake.DeployCount() != 0 {
		t.Fatalf("deploys = %d, want none", h.Fake.DeployCount())
	}
	if s := h.Snap("s"); len(s.Followers) != 0 || len(s.Claims) != 0 {
		t.Fatalf("left behind: followers %v, claims %v", s.Followers, s.Claims)
	}
}

// A leader whose lease is lost mid-deploy (another replica gave it up) cancels the
// deploy at once, commits nothing and deletes the pod it made. Its caller gets 503
// NO_POD_AVAILABLE with Retry-After: the deploy did not fail, a retry may succeed.
func TestLostLeaseCancelsTheDeploy(t *testing.T) {
	h := replicatest.New(t)
	// A ready timeout far beyond the test's patience: only the lost lease can end the
	// deploy in time.
	h.Scope("s", 2, 2, func(c *warmpool.ScopeConfig) { c.Deploy.ReadyTimeoutS = 300 })
	m := manager(h, rm.Config{Clock: h.Clock, Lease: 300 * time.Millisecond})
	hold := h.Fake.Hold()
	defer hold()
	errc := make(chan error, 1)
	go func() { _, err := m.Acquire(context.Background(), "s"); errc <- err }()
	h.WaitInFlight(1)
	h.Clock.Advance(time.Second) // the next extension finds the lease expired
	select {
	case err := <-errc:
		var e *warmpool.Error
		if !errors.As(err, &e) || e.Code != warmpool.CodeNoPodAvailable || e.RetryAfter < 1 || !contains(err.Error(), "lease") {
			t.Fatalf("deploy with a lost lease: %v, want NO_POD_AVAILABLE with retry_after, naming the lease", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deploy ran on after its lease was lost")
	}
	if pods := h.Fake.Pods(); len(pods) != 0 {
		t.Fatalf("driver still has %v", pods)
	}
	h.Settled("s")
}

func TestNewVersionIsNeverGivenAnOldIdlePod(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 2)
	m := manager(h, rm.Config{})
	ctx := context.Background()
	old, err := m.Acquire(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ReleaseClaim(ctx, "s", old.Claim); err != nil {
		t.Fatal(err)
	}
	cfg := h.Scope("s", 8, 2, func(c *warmpool.ScopeConfig) { c.Deploy.Image = "agent:2" })
	l, err := m.Acquire(ctx, "s")
	if err != nil || l.Source != warmpool.SourceDeployed || l.Pod.DeployVer != cfg.DeployVer {
		t.Fatalf("acquire after a deploy change = %+v, %v; want a new pod of %s", l, err, cfg.DeployVer)
	}
	if err := m.ReleaseClaim(ctx, "s", l.Claim); err != nil {
		t.Fatal(err)
	}
}

// A hold's request id makes one hold however often and wherever it is repeated, and
// a route's is refused.
func TestHoldIsIdempotentAcrossReplicas(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("s", 8, 2)
	a, b := manager(h, rm.Config{}), manager(h, rm.Config{})
	hold := h.Fake.Hold()
	ctx := context.Background()
	type res struct {
		l   warmpool.Hold
		err error
	}
	ch := make(chan res, 2)
	for _, m := range []*rm.Manager{a, b} {
		go func() { l, err := m.Hold(ctx, "s", "req-1"); ch <- res{l, err} }()
	}
	h.WaitInFlight(1)
	hold()
	r1, r2 := <-ch, <-ch
	if r1.err != nil || r2.err != nil || r1.l != r2.l {
		t.Fatalf("replays differ: %+v / %+v", r1, r2)
	}
	r3, err := b.Hold(ctx, "s", "req-1")
	if err != nil || r3 != r1.l {
		t.Fatalf("late replay = %+v, %v", r3, err)
	}
	if h.Fake.DeployCount() != 1 {
		t.Fatalf("deploys = %d, want 1 for one request id", h.Fake.DeployCount())
	}
	// SPEC §11.5: a request id a route holds (its slow path runs under the id's mark)
	// is refused to an acquire, which takes nothing.
	route := redisstore.IdemRequest{Scope: "s", ID: "route-1", Fingerprint: redisstore.RouteFingerprint("alice")}
	if m, err := h.Store.IdemClaim(ctx, route, "t1", time.Minute); err != nil || m.State != redisstore.IdemWon {
		t.Fatalf("the route's claim = %+v, %v", m, err)
	}
	before := h.Snap("s")
	if l, err := a.Hold(ctx, "s", "route-1"); warmpool.ErrorCode(err) != warmpool.CodeIdempotencyMismatch {
		t.Fatalf("acquire with the route's request id = %+v, %v; want IDEMPOTENCY_MISMATCH", l, err)
	}
	if after := h.Snap("s"); len(after.Claims) != len(before.Claims) || h.Fake.DeployCount() != 1 {
		t.Fatalf("the refused acquire left claims %v (before %v) after %d deploys", after.Claims, before.Claims, h.Fake.DeployCount())
	}
}

// SPEC §6.8: one scope's deploy never blocks another's.
func TestScopesDeployIndependently(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("a", 1, 1, func(c *warmpool.ScopeConfig) { c.Pool.MaxParallelDeploys = 1 })
	h.Scope("b", 1, 1, func(c *warmpool.ScopeConfig) { c.Pool.MaxParallelDeploys = 1 })
	m := manager(h, rm.Config{})
	hold := h.Fake.Hold()
	ch := make(chan error, 2)
	for _, s := range []string{"a", "b"} {
		go func() { _, err := m.Acquire(context.Background(), s); ch <- err }()
	}
	// Both deploys are in flight at once although each scope allows one at a time.
	h.WaitInFlight(2)
	hold()
	for range 2 {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
}

// Many replicas and goroutines acquire, give back, and purge pods of several scopes
// while deploys are slow and some fail. A watcher checks invariants 1-4 and 6 on
// consistent snapshots throughout; after the dust settles nothing is left (5).
func TestStressInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	h := replicatest.New(t)
	scopes := []string{"s0", "s1", "s2"}
	for i, s := range scopes {
		h.Scope(s, 6, 1+i)
	}
	h.Fake.SetDeployDelay(5 * time.Millisecond)
	ms := []*rm.Manager{manager(h, rm.Config{}), manager(h, rm.Config{}), manager(h, rm.Config{})}
	ctx := context.Background()

	watch := h.Watch(scopes...)

	var wg sync.WaitGroup
	var okN, failN atomic.Int64
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 25 {
				scope := scopes[rng.IntN(len(scopes))]
				m := ms[rng.IntN(len(ms))]
				if w == 0 && i%10 == 0 {
					h.Fake.FailNext(1, "chaos")
				}
				l, err := m.Acquire(ctx, scope)
				if err != nil {
					failN.Add(1)
					continue
				}
				okN.Add(1)
				switch rng.IntN(4) {
				case 0:
					if _, err := m.Purge(ctx, scope, l.Pod.ID, "test"); err != nil {
						t.Error(err)
					}
					if err := m.ReleaseClaim(ctx, scope, l.Claim); err != nil {
						t.Error(err)
					}
				default:
					if err := m.ReleaseClaim(ctx, scope, l.Claim); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	violations, watched := watch.Stop()
	for _, e := range violations {
		t.Error(e)
	}
	if okN.Load() == 0 || watched < 10 {
		t.Fatalf("stress did too little: %d ok, %d failed, %d snapshots", okN.Load(), failN.Load(), watched)
	}
	for _, s := range scopes {
		h.Settled(s)
	}
	t.Logf("%d acquires ok, %d failed, %d deploys, %d snapshots checked", okN.Load(), failN.Load(), h.Fake.DeployCount(), watched)
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Close while acquires keep starting deploys: each deploy's wg.Add is ordered before
// Close's Wait (under -race an Add from zero after a Wait that blocked is a race),
// and an acquire that would lead a deploy once Close has begun starts none: it answers
// 503 NO_POD_AVAILABLE and gives its deploy lease back, so nothing is left in flight.
func TestCloseWhileAcquiresStart(t *testing.T) {
	h := replicatest.New(t)
	h.Scope("c", 1000, 1) // one session a pod: every acquire leads a deploy of its own
	m := manager(h, rm.Config{})
	ctx := context.Background()
	release := h.Fake.Hold()
	defer release()
	first := burst(ctx, "c", 4, m)
	h.WaitInFlight(4) // Close's Wait has deploys to wait for

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var after atomic.Int64 // acquires begun after Close returned
	closed := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				isAfter := false
				select {
				case <-closed:
					isAfter = true
				default:
				}
				_, err := m.Acquire(ctx, "c")
				if isAfter {
					after.Add(1)
					if warmpool.ErrorCode(err) != warmpool.CodeNoPodAvailable || !contains(fmt.Sprint(err), "shutting down") {
						t.Errorf("an acquire after Close: %v, want NO_POD_AVAILABLE from a replica shutting down", err)
					}
				}
			}
		})
	}
	m.Close()
	close(closed)
	replicatest.WaitFor(t, "acquires after Close", func() bool { return after.Load() >= 20 })
	close(stop)
	wg.Wait()
	for _, o := range collect(first, 4) {
		if o.err == nil {
			t.Errorf("an acquire whose deploy Close cancelled got pod %s", o.lease.Pod.ID)
		}
	}
	if s := h.Settled("c"); len(s.Deploys) != 0 || len(s.Pods) != 0 {
		t.Fatalf("after Close: %d deploys in flight and %d pods, want none", len(s.Deploys), len(s.Pods))
	}
}

// A follower is woken by its pod's register and by its deploy's failure, not by its
// periodic check (issue 33: 3,500 followers polling every 50 ms were most of a cold
// burst's Redis work). With the check an hour apart, followers on both replicas
// answer as soon as the deploy ends.
func TestFollowersWakeWhenTheirDeployEnds(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("failed=%v", fail), func(t *testing.T) {
			h := replicatest.New(t)
			h.Scope("s", 4, 4) // max_pods 1, pod_concurrency 4: one deploy, three followers
			cfg := rm.Config{FollowerCheck: time.Hour}
			a, b := manager(h, cfg), manager(h, cfg)
			if fail {
				h.Fake.FailNext(1, "image pull failed")
			}
			hold := h.Fake.Hold()
			ch := burst(context.Background(), "s", 4, a, b)
			h.WaitInFlight(1)
			replicatest.WaitFor(t, "three followers in the room", func() bool { return len(h.Snap("s").Followers) == 3 })
			hold()
			done := make(chan []outcome)
			go func() { done <- collect(ch, 4) }()
			var outs []outcome
			select {
			case outs = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("followers still wait 10 s after their deploy ended: nothing woke them")
			}
			sources, codes, _ := count(outs)
			if fail && codes[warmpool.CodeDeployFailed] != 4 {
				t.Fatalf("codes = %v, want 4 DEPLOY_FAILED", codes)
			}
			if !fail && (sources[warmpool.SourceDeployed] != 1 || sources[warmpool.SourceFollower] != 3) {
				t.Fatalf("sources = %v codes = %v, want 1 deployed and 3 followers", sources, codes)
			}
			release(t, a, "s", outs)
			h.Settled("s")
		})
	}
}
