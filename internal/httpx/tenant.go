package httpx

import "github.com/warmpool/warmpool"

// tenantBody is a PUT /v1/tenants/{tenant} body as it decodes: a nil field was not
// given (or was null).
type tenantBody struct {
	MaxPods     *int64  `json:"max_pods"`
	MaxCPU      *string `json:"max_cpu"`
	MaxMemory   *string `json:"max_memory"`
	MaxSessions *int64  `json:"max_sessions"`
	MaxIdlePods *int64  `json:"max_idle_pods"`
	Weight      *int64  `json:"weight"`
}

// DecodeTenantConfig reads a tenant's quotas strictly (as DecodeStrict does) and
// validates them: a field not given (or null) sets no limit, and weight is
// warmpool.DefaultTenantWeight when not given. This is how a tenant config enters
// the system from outside (a PUT body). Errors: VALIDATION naming the faulty fields.
func DecodeTenantConfig(doc []byte) (warmpool.TenantConfig, error) {
	var b tenantBody
	if err := DecodeStrict(doc, &b); err != nil {
		return warmpool.TenantConfig{}, err
	}
	cfg := warmpool.TenantConfig{MaxPods: b.MaxPods, MaxCPU: b.MaxCPU, MaxMemory: b.MaxMemory,
		MaxSessions: b.MaxSessions, MaxIdlePods: b.MaxIdlePods, Weight: warmpool.DefaultTenantWeight}
	if b.Weight != nil {
		cfg.Weight = *b.Weight
	}
	if err := cfg.Validate(); err != nil {
		return warmpool.TenantConfig{}, err
	}
	return cfg, nil
}
