package warmpool

import "time"

// What the managers answer, in the shapes of the HTTP API (SPEC §3, §10): the
// domain's result types, so that the HTTP layer needs the root and no manager.

// Binding is where a session goes.
type Binding struct {
	ScopeID   string `json:"scope_id"`
	SessionID string `json:"session_id"`
	PodID     string `json:"pod_id"`
	SSEURL    string `json:"pod_sse_url"`
	DeployVer string `json:"deploy_ver"`
	// New is true when this call bound the session (false: it was bound already).
	New bool `json:"new"`
	// Source says how Route found the pod: SourceAffinity (the session was
	// bound already), SourceWarm (a running pod), SourceFollower, SourceDeployed or
	// SourceQueued (after a wait in the queue). Not part of the answer.
	Source string `json:"-"`
	// ExpiresAt is when the session expires unless refreshed (or, with a fixed expiry,
	// ends); set by Get only. Not part of the answer.
	ExpiresAt time.Time `json:"-"`
}

// RouteOptions are the optional inputs of a route (the session manager's RouteWith).
type RouteOptions struct {
	// RequestID, when set, makes a repeated call return the first answer.
	RequestID string
	// FixedTTL, when above zero, is the TTL of a binding the route makes, in place of
	// the scope's session_ttl_s, and fixes the session's expiry: routes, touches and
	// agent reports do not move it, Deadline does (E2B's sandbox timeout). A session
	// bound already keeps its expiry.
	FixedTTL time.Duration
	// Config is the session's session_config, sealed (SPEC §12.2): kept for the pod's
	// agent when the route binds the session; a session bound already keeps its own.
	Config []byte
}

// Hold is a pod handed out to an API caller: one slot of the pod is the caller's until
// it releases the hold or Until passes (pool.hold_ttl_s after the acquire or the last
// touch); then the slot goes to a waiter, or the pod back to the warm pool.
type Hold struct {
	Pod    Pod       `json:"pod"`
	Source string    `json:"source"`
	ID     string    `json:"hold_id"`
	Until  time.Time `json:"hold_until"`
}

// PoolView is a scope's pool: its pods and what waits for them (GET …/pool).
type PoolView struct {
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

// PoolBackoff is a scope's refill backoff as GET …/pool shows it: failed deploys of the
// current deploy_ver in a row, until when no deploy starts (null without a backoff),
// and the last failure's reason.
type PoolBackoff struct {
	Failures  int        `json:"failures"`
	Until     *time.Time `json:"until"`
	LastError string     `json:"last_error"`
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

// ScopeDeleted is the answer of a scope deletion: the scope and how many pods it had (all
// of them go: idle ones at once, busy ones when their last session or hold ends, every
// one at once with force).
type ScopeDeleted struct {
	ScopeID string `json:"scope_id"`
	Pods    int    `json:"pods"`
}

// ScopeCounts are the sizes of a scope's pool, for listings and gauges.
type ScopeCounts struct {
	ScopeID   string
	DeployVer string
	Version   int64
	MaxPods   int64
	Pods      int64
	Idle      int64
	// OldPods counts the pods of another deploy_ver than the scope's current one.
	OldPods   int64
	Sessions  int64
	Deploying int64
	Followers int64
	Waiters   int64
	// Backoff is the refill backoff's failed deploys in a row (0: none).
	Backoff int64
	// TargetIdle is how many idle pods the scope keeps (PoolTarget).
	TargetIdle int64
}

// ScopeSummary is a scope's pool sizes with its pod_concurrency: a row of the pool
// page's summary.
type ScopeSummary struct {
	ScopeCounts
	PodConcurrency int64
}
