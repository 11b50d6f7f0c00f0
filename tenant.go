package warmpool

import "context"

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
}
