package sweeper_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sm"
)

// Issue 20 point 8 and SPEC §6: goroutines route and end sessions through three
// replicas while the scope's capacity is lowered and raised under them (pod_concurrency
// 4 → 2 → 2 → 1 → 4 → 1, max_pods 2 → 2 → 4 → 3 → 2 → 2) and the due sweep runs all the
// time. A watcher checks the invariants on consistent snapshots throughout, as
// invariant.Capacity keeps them: what a lowering left over may drain, never grow. Once
// every session has ended and the sweep has run, the scope holds the last limits
// strictly. Seen red with `n > q.pc` taken out of hand_off in lua/lib/handoff.lua
// ("claim ... placed on pod ..., which is over pod_concurrency 1") and with
// pod_acquire.lua's lead test made `npods + #deploys <= max_pods` ("... > max_pods 2").
func TestCapacityChangesKeepInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	h := newHarness(t)
	type limits struct{ mc, pc int }
	steps := []limits{{8, 4}, {4, 2}, {8, 2}, {3, 1}, {8, 4}, {2, 1}}
	pool := func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS, c.Pool.SessionTTLS = 3, 1, 86400 }
	h.Scope("a", steps[0].mc, steps[0].pc, pool)
	h.Fake.SetDeployDelay(2 * time.Millisecond)
	ms := []*sm.Manager{h.sm, h.Replica(replicatest.Config{Clock: h.Clock, SM: sm.Config{Recheck: 20 * time.Millisecond}}).SM, h.replica()}
	ctx := context.Background()
	watch := h.Watch("a")

	stop := make(chan struct{})
	var sweeps sync.WaitGroup
	sweeps.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if err := h.sw.SweepShard(ctx, redisstore.DueShard("a")); err != nil {
				t.Errorf("sweep: %v", err)
			}
		}
	})

	var wg sync.WaitGroup
	var ops, bound, refused atomic.Int64
	const workers, each = 8, 60
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 20))
			for range each {
				session := fmt.Sprintf("u%d", rng.IntN(14))
				m := ms[rng.IntN(len(ms))]
				if rng.IntN(10) < 6 {
					_, err := m.Route(ctx, "a", session, "")
					switch code := warmpool.ErrorCode(err); {
					case err == nil:
						bound.Add(1)
					case code == warmpool.CodeQueueFull, code == warmpool.CodeWaitTimeout, code == warmpool.CodeNoPodAvailable:
						refused.Add(1)
					default:
						t.Errorf("route %s: %v", session, err)
					}
				} else if _, err := m.End(ctx, "a", session); err != nil {
					t.Errorf("end %s: %v", session, err)
				}
				ops.Add(1)
			}
		})
	}
	for i, l := range steps[1:] {
		n := int64((i + 1) * workers * each / len(steps))
		replicatest.WaitFor(t, fmt.Sprintf("%d operations", n), func() bool { return ops.Load() >= n })
		h.Scope("a", l.mc, l.pc, pool)
	}
	wg.Wait()
	close(stop)
	sweeps.Wait()
	violations, watched := watch.Stop()
	for _, v := range violations {
		t.Error(v)
	}
	if bound.Load() < 50 || refused.Load() == 0 || watched < 50 {
		t.Errorf("the storm did too little: %d routes bound, %d refused, %d snapshots", bound.Load(), refused.Load(), watched)
	}

	// Drained: every session ended and the sweep run, the last limits hold strictly.
	for sess := range h.Snap("a").Sessions {
		if _, err := ms[0].End(ctx, "a", sess); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.sw.SweepShard(ctx, redisstore.DueShard("a")); err != nil {
		t.Fatal(err)
	}
	s := h.Settled("a")
	last := h.Current("a").Config
	for _, v := range invariant.Violations(s, last, []string{last.Deploy.DeployVer()}, true) {
		t.Errorf("after draining: %s", v)
	}
	t.Logf("%d routes bound, %d refused, %d deploys, %d pods deleted, %d snapshots checked; %d pods left (max_pods %d)",
		bound.Load(), refused.Load(), h.Fake.DeployCount(), len(h.Fake.Deleted()), watched, len(s.Pods), last.Pool.MaxPods())
}
