package redisstore_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// demandEnv is a scope of 40 pods of one slot each, 30 of them registered idle, and a
// measured deploy time of 2 s: a refill's lead time is 2 s + the sweep's default tick.
func demandEnv(t *testing.T, policy string) *env {
	t.Helper()
	e := newEnv(t, func(c *warmpool.ScopeConfig) {
		c.Pool.MaxConcurrency, c.Pool.PodConcurrency, c.Pool.MinIdlePods = 40, 1, 30
	})
	deploys := e.warmDeploys()
	e.now = e.now.Add(2 * time.Second)
	for _, d := range deploys {
		if _, _, err := e.register(redisstore.AcquireResult{Deploy: d.Deploy, Fence: d.Fence, Spec: d.Spec}, ""); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(e.poolSnap().Pods); n != 30 {
		t.Fatalf("%d pods, want 30", n)
	}
	e.publish(func(c *warmpool.ScopeConfig) {
		c.Pool.MaxConcurrency, c.Pool.PodConcurrency, c.Pool.MinIdlePods, c.Pool.WarmPolicy = 40, 1, 1, policy
	})
	return e
}

// warmDeploys takes placeholders of the scope's warm deploys (the refill's) until
// PodPlaceholder has no more to start, and returns them.
func (e *env) warmDeploys() []redisstore.PlaceholderResult {
	e.t.Helper()
	var out []redisstore.PlaceholderResult
	for {
		res, err := e.store.PodPlaceholder(context.Background(), e.scope, e.now, e.now.Add(time.Minute), e.now.Add(time.Minute))
		if err != nil {
			e.t.Fatal(err)
		}
		if res.Kind != redisstore.PlaceholderDeploy {
			return out
		}
		out = append(out, res)
	}
}

// target reads the scope's idle target now.
func (e *env) target() redisstore.Target {
	e.t.Helper()
	tg, err := e.store.PoolTarget(context.Background(), e.scope, e.now)
	if err != nil {
		e.t.Fatal(err)
	}
	return tg
}

// drive runs the scope from now for d: sessions arrive at rate(t) per second (t from
// the start), each lasting hold, and ends come due in order; at every second it calls
// each(t).
func (e *env) drive(d, hold time.Duration, rate func(t time.Duration) float64, each func(t time.Duration)) {
	e.t.Helper()
	ctx := context.Background()
	const step = 100 * time.Millisecond
	var owed float64
	type end struct {
		at time.Time
		id string
	}
	var ends []end
	for t := time.Duration(0); t < d; t += step {
		e.now = e.now.Add(step)
		for len(ends) > 0 && !ends[0].at.After(e.now) {
			if _, err := e.store.SessionEnd(ctx, e.scope, ends[0].id, e.now); err != nil {
				e.t.Fatal(err)
			}
			ends = ends[1:]
		}
		for owed += rate(t) * step.Seconds(); owed >= 1; owed-- {
			e.sessions++
			id := fmt.Sprintf("s%d", e.sessions)
			res, err := e.store.SessionRoute(ctx, e.scope, redisstore.RouteArgs{Now: e.now, Session: id})
			if err != nil {
				e.t.Fatal(err)
			}
			if res.Kind == redisstore.RouteNew {
				ends = append(ends, end{e.now.Add(hold), id})
			}
		}
		if t%time.Second == 0 {
			each(t)
		}
	}
}

// TestDemandTargetRisesAheadOfARampAndFallsBack: under warm_policy demand the target
// follows a ramp of arrivals (sessions of 5 s, 0 to 3 a second over 40 s) ahead of it:
// from the middle of the ramp on it is at least the slots the current rate takes over
// the lead time net of the ends, and more at the top than at the middle; once the
// arrivals stop it falls back to min_idle_pods. Under static it stays min_idle_pods.
func TestDemandTargetRisesAheadOfARampAndFallsBack(t *testing.T) {
	t.Parallel()
	const hold, ramp = 5 * time.Second, 40 * time.Second
	rate := func(t time.Duration) float64 {
		if t >= ramp {
			return 0
		}
		return 3 * t.Seconds() / ramp.Seconds()
	}
	for _, policy := range []string{warmpool.WarmStatic, warmpool.WarmDemand} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			e := demandEnv(t, policy)
			targets := map[time.Duration]int{}
			e.drive(2*time.Minute, hold, rate, func(at time.Duration) {
				tg := e.target()
				targets[at] = tg.Idle
				if policy == warmpool.WarmStatic {
					if tg.Idle != 1 || tg.Demand != nil {
						t.Fatalf("static at %v: %+v, want min_idle_pods 1 and no demand figures", at, tg)
					}
					return
				}
				lead := tg.Demand.LeadTime
				if lead != 2*time.Second+redisstore.DefaultSweepPeriod {
					t.Fatalf("lead time %v, want the measured 2 s deploy + the sweep's tick", lead)
				}
				// The slots the rate of now takes over the lead time, net of the ends of
				// the sessions that started a hold before.
				now := rate(at) - rate(at-hold)
				if at >= ramp/2 && at < ramp && float64(tg.Idle) < math.Ceil(now*lead.Seconds()) {
					t.Errorf("at %v of the ramp: target %d, below the %.1f slots the net rate takes over the lead time (%+v)", at, tg.Idle, now*lead.Seconds(), *tg.Demand)
				}
			})
			if policy == warmpool.WarmStatic {
				return
			}
			mid, top, after := targets[ramp/2], targets[ramp-time.Second], targets[2*time.Minute-time.Second]
			if top <= mid || mid <= 1 {
				t.Errorf("targets mid-ramp %d, at its top %d: want rising above min_idle_pods 1", mid, top)
			}
			if after != 1 {
				t.Errorf("target %d a minute after the ramp, want min_idle_pods 1", after)
			}
		})
	}
}

// TestDemandTargetOnASteadyLoad: arrivals that end as many sessions as they start
// (two a second, 5 s each) keep the target within min_idle_pods + 1, and the refill
// deploys no more than the target.
func TestDemandTargetOnASteadyLoad(t *testing.T) {
	t.Parallel()
	e := demandEnv(t, warmpool.WarmDemand)
	most := 0
	e.drive(90*time.Second, 5*time.Second, func(time.Duration) float64 { return 2 }, func(at time.Duration) {
		if at >= 30*time.Second {
			most = max(most, e.target().Idle)
		}
	})
	if most > 2 {
		t.Errorf("the target reached %d on a steady load, want at most min_idle_pods + 1 = 2", most)
	}
	if tg := e.target(); tg.Demand == nil || tg.Demand.TakesPerS < 1.5 || tg.Demand.FreesPerS < 1.5 {
		t.Errorf("figures %+v, want about 2 takes and 2 frees a second", tg.Demand)
	}
}

// TestDemandRefillFillsToTheTarget: the refill (pod_placeholder.lua) deploys warm pods
// up to the demand target, not to min_idle_pods; a static scope with the same counts
// keeps min_idle_pods.
func TestDemandRefillFillsToTheTarget(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{warmpool.WarmStatic, warmpool.WarmDemand} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, func(c *warmpool.ScopeConfig) {
				c.Pool.MaxConcurrency, c.Pool.PodConcurrency, c.Pool.MinIdlePods, c.Pool.WarmPolicy = 40, 1, 1, policy
			})
			ctx := context.Background()
			k := e.store.Keys().Scope(e.scope)
			// 30 takes decayed over the last 15 s and 120 over the last minute, none
			// freed: two a second, and a deploy takes 2 s.
			if err := e.r.Client.HSet(ctx, k.Demand, "t", e.now.UnixMilli(), "in_fast", 30, "in_slow", 120, "out_fast", 0, "out_slow", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.r.Client.HSet(ctx, k.DeployStats, "est", 2000).Err(); err != nil {
				t.Fatal(err)
			}
			tg := e.target()
			want := 1
			if policy == warmpool.WarmDemand {
				// n = 2/s × 4 s (no trend: both counts say 2 a second), headroom
				// 0.5 × sqrt(8): ceil(8 + 1.41) = 10.
				want = 10
			}
			if tg.Idle != want {
				t.Fatalf("target %+v, want %d", tg, want)
			}
			if deploys := len(e.warmDeploys()); deploys != want {
				t.Fatalf("the refill started %d warm deploys, want the target %d", deploys, want)
			}
		})
	}
}
