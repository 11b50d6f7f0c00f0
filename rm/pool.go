package rm

import (
	"context"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/lua"
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

// Scopes reads the pool sizes of every published scope in one pass.
// Errors: STORE_UNAVAILABLE.
func (m *Manager) Scopes(ctx context.Context) ([]lua.ScopeCounts, error) {
	return m.store.Counts(ctx)
}
