package warmpool

import (
	"context"
	"time"
)

// NoLimit is a TenantLimits field that sets no limit.
const NoLimit int64 = -1

// TenantLimits are a tenant's quotas (SPEC §12.1) as the scripts that take a slot or
// lead a deploy check them: whole numbers, NoLimit where the tenant's config names
// none. CPU is in millicores and memory in bytes, the pod requests summed as the pod
// policy computes them.
type TenantLimits struct {
	Pods, MilliCPU, MemoryBytes, Sessions, IdlePods int64
	// Weight is the tenant's weight in the fair share, 1 to 1000.
	Weight int64
}

// Unlimited are the limits of a tenant without quotas: weight 1, no limit.
func Unlimited() TenantLimits {
	return TenantLimits{Pods: NoLimit, MilliCPU: NoLimit, MemoryBytes: NoLimit, Sessions: NoLimit, IdlePods: NoLimit, Weight: 1}
}

// TenantUse is what a tenant's scopes hold together right now: their pods (deploys in
// flight included), the cpu (millicores) and memory (bytes) those pods request, their
// bound sessions and idle pods; and Scopes, how many published scopes name the
// tenant.
type TenantUse struct {
	Pods, MilliCPU, MemoryBytes, Sessions, IdlePods int64
	Scopes                                          int64
}

// PodRequests are the cpu (millicores) and memory (bytes) one pod of the spec
// requests, as a tenant's use counts them: the agent container's requests (the
// shorthand deploy.resources, or its resources.requests in the pod template); 0 for
// one it leaves unset. Other containers and pod overhead are not counted.
func (d DeploySpec) PodRequests() (milliCPU, memoryBytes int64) {
	r := d.Resources
	if agent, err := d.Agent(); err == nil && agent.Sets["resources"] {
		r = agent.Requests
	}
	if r.CPU != "" {
		milliCPU, _, _ = ParseQuantity(r.CPU)
	}
	if r.Memory != "" {
		_, memoryBytes, _ = ParseQuantity(r.Memory)
	}
	return milliCPU, memoryBytes
}

// TenantQuotas is where quotas are enforced (the Redis store): every replica's feed
// publishes each tenant's limits to it, and GET /v1/tenants/{tenant} reads use from
// it.
type TenantQuotas interface {
	// PublishTenant sets the tenant's limits. Errors: STORE_UNAVAILABLE.
	PublishTenant(ctx context.Context, tenant string, l TenantLimits) error
	// ForgetTenant drops the tenant's limits (it is Unlimited from then on); its use
	// stays counted. Errors: STORE_UNAVAILABLE.
	ForgetTenant(ctx context.Context, tenant string) error
	// TenantUse reads what the tenant's scopes hold. Errors: STORE_UNAVAILABLE.
	TenantUse(ctx context.Context, tenant string) (TenantUse, error)
	// BalanceTenant makes the tenant's scopes governed by the limits l (Unlimited:
	// by none) and takes back the allowance they do not use. Errors:
	// STORE_UNAVAILABLE.
	BalanceTenant(ctx context.Context, tenant string, l TenantLimits) error
	// BalanceGranted does what the total cap (--max-pods-total) needs of the tenants
	// job: a balance pass of each tenant it granted pods since, but those in done
	// (balanced already); nothing without the cap. Errors: STORE_UNAVAILABLE.
	BalanceGranted(ctx context.Context, done map[string]TenantLimits) error
}

// TenantOf is the tenant of the scope whose config c is: c.Tenant, or, when the
// config names none, the scope itself (SPEC §12.1). It is the one place that default
// is decided.
func (c ScopeConfig) TenantOf(scope string) string {
	if c.Tenant != "" {
		return c.Tenant
	}
	return scope
}

// TenantView is a tenant as GET /v1/tenants/{tenant} answers it: its stored quotas
// (Version 0 and the config of no limit when it has none), what its scopes use and
// its share.
type TenantView struct {
	TenantID  string        `json:"tenant"`
	Version   int64         `json:"version"`
	Config    TenantConfig  `json:"config"`
	UpdatedAt *time.Time    `json:"updated_at,omitempty"`
	Use       TenantUseView `json:"use"`
	// Share is the tenant's weighted share: its weight over the sum of the weights
	// of the tenants with quotas (its own counted once, with quotas or not), to four
	// decimals.
	Share float64 `json:"share"`
}

// TenantUseView is what a tenant's scopes hold, as GET /v1/tenants/{tenant} answers
// it: CPU and memory as Kubernetes quantities ("1500m", "3Gi").
type TenantUseView struct {
	Pods     int64  `json:"pods"`
	CPU      string `json:"cpu"`
	Memory   string `json:"memory"`
	Sessions int64  `json:"sessions"`
	IdlePods int64  `json:"idle_pods"`
}

// View formats u as the answers show it.
func (u TenantUse) View() TenantUseView {
	return TenantUseView{
		Pods:     u.Pods,
		CPU:      FormatMilli(u.MilliCPU),
		Memory:   FormatBytes(u.MemoryBytes),
		Sessions: u.Sessions,
		IdlePods: u.IdlePods,
	}
}

// TenantDeleted is the answer of a tenant's delete: the version its quotas were
// deleted at.
type TenantDeleted struct {
	TenantID string `json:"tenant"`
	Version  int64  `json:"version"`
}

// TenantUsage is one tenant's use, for the tenant gauges.
type TenantUsage struct {
	TenantID string
	Use      TenantUse
}
