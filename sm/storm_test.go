package sm_test

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
	"github.com/warmpool/warmpool/sm"
)

// Issue 3 and SPEC §6: goroutines route, touch and end sessions of two small scopes
// through three replicas (some routes with request ids, some replayed), so that pods
// fill, queue, go idle and are reused all the time. A watcher checks invariants 1-4
// and 6 on consistent snapshots throughout; once every session is ended nothing is
// left in flight (5). Guards the `ZREM idle` of session_route.lua's bind.
func TestStormKeepsInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("stress test")
	}
	h := replicatest.New(t)
	scopes := []string{"a", "b"}
	h.Scope("a", 4, 2, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = 2, 1 })
	h.Scope("b", 3, 1, func(c *warmpool.ScopeConfig) { c.Pool.QueueSize, c.Pool.WaitTimeoutS = 1, 1 })
	h.Fake.SetDeployDelay(2 * time.Millisecond)
	ms := []*sm.Manager{
		replica(h, replicatest.Config{SM: sm.Config{Recheck: 20 * time.Millisecond}}),
		replica(h, replicatest.Config{SM: sm.Config{Recheck: 50 * time.Millisecond}}),
		replica(h, replicatest.Config{}),
	}
	ctx := context.Background()

	watch := h.Watch(scopes...)

	var (
		wg                       sync.WaitGroup
		routes, refused, touches atomic.Int64
		ends, replays            atomic.Int64
	)
	codes := sync.Map{}
	for w := range 10 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for i := range 30 {
				scope := scopes[rng.IntN(len(scopes))]
				session := fmt.Sprintf("u%d", rng.IntN(6))
				m := ms[rng.IntN(len(ms))]
				switch op := rng.IntN(10); {
				case op < 5:
					rid := ""
					switch rng.IntN(4) {
					case 0:
						rid = fmt.Sprintf("w%d-%d", w, i) // fresh
					case 1:
						rid = fmt.Sprintf("%s-shared%d", session, rng.IntN(3)) // likely a replay
						replays.Add(1)
					}
					b, err := m.Route(ctx, scope, session, rid)
					if err != nil {
						code := warmpool.ErrorCode(err)
						n, _ := codes.LoadOrStore(code, new(atomic.Int64))
						n.(*atomic.Int64).Add(1)
						switch code {
						case warmpool.CodeQueueFull, warmpool.CodeWaitTimeout, warmpool.CodeNoPodAvailable:
							refused.Add(1)
						default:
							t.Errorf("route %s/%s: %v", scope, session, err)
						}
						continue
					}
					if b.PodID == "" || b.ScopeID != scope {
						t.Errorf("route %s/%s: bad binding %+v", scope, session, b)
					}
					routes.Add(1)
				case op < 7:
					if _, err := m.Touch(ctx, scope, session); err != nil {
						t.Errorf("touch %s/%s: %v", scope, session, err)
					}
					touches.Add(1)
				default:
					if _, err := m.End(ctx, scope, session); err != nil {
						t.Errorf("end %s/%s: %v", scope, session, err)
					}
					ends.Add(1)
				}
			}
		})
	}
	wg.Wait()
	violations, watched := watch.Stop()
	for _, e := range violations {
		t.Error(e)
	}
	if routes.Load() < 20 || refused.Load() == 0 || watched < 20 {
		t.Errorf("the storm did too little: %d routes bound, %d refused, %d snapshots", routes.Load(), refused.Load(), watched)
	}

	// Settle: end every session; nothing may be left in flight and every pod is idle.
	for _, scope := range scopes {
		for sess := range h.Snap(scope).Sessions {
			if _, err := ms[0].End(ctx, scope, sess); err != nil {
				t.Fatal(err)
			}
		}
		s := h.Settled(scope)
		for _, p := range s.Pods {
			if !p.Idle || p.Slots != 0 {
				t.Errorf("scope %s pod %s after settling: %d slots, idle %v", scope, p.Pod.ID, p.Slots, p.Idle)
			}
		}
	}
	byCode := map[warmpool.Code]int64{}
	codes.Range(func(k, v any) bool { byCode[k.(warmpool.Code)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("%d routes bound (%d with a shared request id), %d refused %v, %d touches, %d ends, %d deploys, %d snapshots checked",
		routes.Load(), replays.Load(), refused.Load(), byCode, touches.Load(), ends.Load(), h.Fake.DeployCount(), watched)
}
