package redisstore

import (
	"context"
	"strconv"
	"time"

	"github.com/warmpool/warmpool"
)

// Target is how many idle pods of its current version a scope keeps (the refill deploys
// up to it, the reclaim keeps it), and under warm_policy "demand" the figures it came
// from (idle_target in lib/demand.lua; docs/architecture.md, "Demand-driven warm
// pools").
type Target struct {
	Idle        int
	Policy      string
	MinIdlePods int
	// Demand is set under warm_policy "demand".
	Demand *Demand
}

// Demand is what the demand policy's target came from: the scope's slot takes and
// frees per second (counted across replicas, over about the last 15 s), the trend of
// their difference, the measured deploy time, the lead time a refill needs (the deploy
// time plus the sweep's tick), the net takes expected over that lead time (before the
// burst headroom), and the bound max_idle_pods.
type Demand struct {
	MaxIdlePods  int
	TakesPerS    float64
	FreesPerS    float64
	TrendPerS2   float64
	DeployTime   time.Duration
	LeadTime     time.Duration
	ExpectedNeed float64
}

// PoolTarget runs pool_target.lua: the scope's idle target now (the scope may be
// deleted). Errors: SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (s *Store) PoolTarget(ctx context.Context, scope string, now time.Time) (Target, error) {
	r, err := s.call(ctx, poolTarget, s.keys.Scope(scope), nil, ms(now), s.sweepPeriod.Milliseconds())
	if err != nil {
		return Target{}, err
	}
	t := Target{Idle: r.count(0), Policy: r.oneOf(1, warmpool.WarmStatic, warmpool.WarmDemand), MinIdlePods: r.count(2)}
	if t.Policy == warmpool.WarmDemand {
		perMS := func(i int) float64 { return r.float(i) * 1000 }
		t.Demand = &Demand{
			MaxIdlePods: r.count(3), TakesPerS: perMS(4), FreesPerS: perMS(5), TrendPerS2: r.float(6) * 1e6,
			DeployTime: time.Duration(r.float(7) * float64(time.Millisecond)), LeadTime: time.Duration(r.float(8) * float64(time.Millisecond)),
			ExpectedNeed: r.float(9),
		}
	}
	return t, r.err()
}

// float reads a number field written by Lua's tostring.
func (r *reply) float(i int) float64 {
	s := r.str(i)
	if r.bad != nil {
		return 0
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		r.fail("field %d is %q, want a number", i+1, s)
	}
	return f
}
