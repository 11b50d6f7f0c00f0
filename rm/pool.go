package rm

import (
	"context"
	"math"
	"time"

	"github.com/warmpool/warmpool"
)

// Pool is a scope's pool: its pods and what waits for them (GET …/pool).
type Pool struct {
	ScopeID      string    `json:"scope_id"`
	DeployVer    string    `json:"deploy_ver"`
	MaxPods      int       `json:"max_pods"`
	Pods         []PoolPod `json:"pods"`
	Placeholders int       `json:"placeholders"`
	Followers    int       `json:"followers"`
	Waiters      int       `json:"waiters"`
	// Backoff is the refill backoff (SPEC §11.3); failures 0 when there is none.
	Backoff PoolBackoff `json:"backoff"`
	// TargetIdle is how many idle pods of the current version the pool keeps now:
	// min_idle_pods under warm_policy "static", the demand estimate under "demand".
	TargetIdle int    `json:"target_idle"`
	WarmPolicy string `json:"warm_policy"`
	// Demand is what the demand target came from; null under "static".
	Demand *PoolDemand `json:"demand"`
}

// PoolDemand is what a demand target came from (SPEC §11.3): the scope's slot takes
// and frees per second across replicas (over about the last 15 s), the trend of their
// difference, the measured deploy time, the lead time a refill needs (deploy time plus
// the sweep's tick), the net takes expected over the lead time before the burst
// headroom, and the bounds.
type PoolDemand struct {
	TakesPerS     float64 `json:"takes_per_s"`
	FreesPerS     float64 `json:"frees_per_s"`
	TrendPerS2    float64 `json:"trend_per_s2"`
	DeployTimeS   float64 `json:"deploy_time_s"`
	LeadTimeS     float64 `json:"lead_time_s"`
	ExpectedTakes float64 `json:"expected_takes"`
	MinIdlePods   int     `json:"min_idle_pods"`
	MaxIdlePods   int     `json:"max_idle_pods"`
}

// PoolBackoff is a scope's refill backoff as GET …/pool shows it: failed deploys of the
// current deploy_ver in a row, until when no deploy starts (null without a backoff),
// and the last failure's reason.
type PoolBackoff struct {
	Failures  int        `json:"failures"`
	Until     *time.Time `json:"until"`
	LastError string     `json:"last_error"`
}

// PoolPod is one pod of a Pool. State is "busy", "idle", or "draining" (its agent
// reported that it drains: it takes no new session, and is deleted once it has none).
type PoolPod struct {
	PodID     string     `json:"pod_id"`
	State     string     `json:"state"`
	Sessions  int        `json:"sessions"`
	Slots     int        `json:"slots"`
	DeployVer string     `json:"deploy_ver"`
	SSEURL    string     `json:"pod_sse_url"`
	IdleSince *time.Time `json:"idle_since"`
}

// Pool reads a scope's pool. Errors: VALIDATION, SCOPE_NOT_FOUND, STORE_UNAVAILABLE.
func (m *Manager) Pool(ctx context.Context, scope string) (Pool, error) {
	if err := warmpool.CheckScopeID(scope); err != nil {
		return Pool{}, err
	}
	rec, err := m.store.Scope(ctx, scope)
	if err != nil {
		return Pool{}, err
	}
	snap, err := m.store.PoolSnapshot(ctx, scope)
	if err != nil {
		return Pool{}, err
	}
	p := Pool{
		ScopeID: scope, DeployVer: rec.DeployVer, MaxPods: rec.Config.Pool.MaxPods(), Pods: make([]PoolPod, 0, len(snap.Pods)),
		Placeholders: len(snap.Deploys), Followers: len(snap.Followers), Waiters: snap.Queued,
	}
	t, err := m.store.PoolTarget(ctx, scope, m.clock.Now())
	if err != nil {
		return Pool{}, err
	}
	p.TargetIdle, p.WarmPolicy = t.Idle, t.Policy
	if d := t.Demand; d != nil {
		p.Demand = &PoolDemand{
			TakesPerS: round3(d.TakesPerS), FreesPerS: round3(d.FreesPerS), TrendPerS2: round3(d.TrendPerS2),
			DeployTimeS: round3(d.DeployTime.Seconds()), LeadTimeS: round3(d.LeadTime.Seconds()), ExpectedTakes: round3(d.ExpectedNeed),
			MinIdlePods: t.MinIdlePods, MaxIdlePods: d.MaxIdlePods,
		}
	}
	if b := snap.Backoff; b.Failures > 0 {
		until := b.Until.UTC()
		p.Backoff = PoolBackoff{Failures: b.Failures, Until: &until, LastError: b.LastError}
	}
	for _, sp := range snap.Pods {
		pp := PoolPod{PodID: sp.Pod.ID, State: "busy", Sessions: sp.Sessions(), Slots: sp.Slots, DeployVer: sp.Pod.DeployVer, SSEURL: sp.Pod.SSEURL}
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
