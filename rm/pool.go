package rm

import (
	"context"
	"math"

	"github.com/warmpool/warmpool"
)

// Pool reads a scope's pool. Errors: VALIDATION, SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) Pool(ctx context.Context, scope string) (warmpool.PoolView, error) {
	if err := warmpool.CheckScopeID(scope); err != nil {
		return warmpool.PoolView{}, err
	}
	rec, err := m.store.Scope(ctx, scope)
	if err != nil {
		return warmpool.PoolView{}, err
	}
	snap, err := m.store.PoolSnapshot(ctx, scope)
	if err != nil {
		return warmpool.PoolView{}, err
	}
	p := warmpool.PoolView{
		ScopeID: scope, DeployVer: rec.DeployVer, MaxPods: rec.Config.Pool.MaxPods(), Pods: make([]warmpool.PoolPod, 0, len(snap.Pods)),
		Placeholders: len(snap.Deploys), Followers: len(snap.Followers), Waiters: snap.Queued,
	}
	t, err := m.store.PoolTarget(ctx, scope, m.clock.Now())
	if err != nil {
		return warmpool.PoolView{}, err
	}
	p.TargetIdle, p.WarmPolicy = t.Idle, t.Policy
	if d := t.Demand; d != nil {
		p.Demand = &warmpool.PoolDemand{
			TakesPerS: round3(d.TakesPerS), FreesPerS: round3(d.FreesPerS), TrendPerS2: round3(d.TrendPerS2),
			DeployTimeS: round3(d.DeployTime.Seconds()), LeadTimeS: round3(d.LeadTime.Seconds()), ExpectedTakes: round3(d.ExpectedNeed),
			MinIdlePods: t.MinIdlePods, MaxIdlePods: d.MaxIdlePods,
		}
	}
	if b := snap.Backoff; b.Failures > 0 {
		until := b.Until.UTC()
		p.Backoff = warmpool.PoolBackoff{Failures: b.Failures, Until: &until, LastError: b.LastError}
	}
	for _, sp := range snap.Pods {
		pp := warmpool.PoolPod{PodID: sp.Pod.ID, State: "busy", Sessions: sp.Sessions(), Slots: sp.Slots, DeployVer: sp.Pod.DeployVer, SSEURL: sp.Pod.SSEURL}
		if sp.Idle {
			since := sp.IdleSince.UTC()
			pp.State, pp.IdleSince = "idle", &since
		}
		if sp.Draining { // its agent drains: it takes no new session, and goes once empty
			pp.State = "draining"
		}
		p.Pods = append(p.Pods, pp)
	}
	return p, nil
}

// round3 rounds to three decimals: the figures of a demand estimate are not exact.
func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
