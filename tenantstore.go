package warmpool

import (
	"context"
	"errors"
	"time"
)

// TenantConfig is a tenant's quotas as PUT /v1/tenants/{tenant} takes them and the
// config store keeps them (SPEC §12.1): a nil field sets no limit; MaxCPU and
// MaxMemory are Kubernetes quantities ("4", "1500m", "8Gi"). Weight is 1 to 1000,
// and 1 when the document names none. package tenants validates a config and turns it
// into TenantLimits.
type TenantConfig struct {
	MaxPods     *int64  `json:"max_pods,omitempty"`
	MaxCPU      *string `json:"max_cpu,omitempty"`
	MaxMemory   *string `json:"max_memory,omitempty"`
	MaxSessions *int64  `json:"max_sessions,omitempty"`
	MaxIdlePods *int64  `json:"max_idle_pods,omitempty"`
	Weight      int64   `json:"weight"`
}

// StoredTenant is one version of a tenant's quotas as the config store keeps it.
type StoredTenant struct {
	TenantID  string       `json:"tenant"`
	Version   int64        `json:"version"`
	Config    TenantConfig `json:"config"`
	UpdatedAt time.Time    `json:"updated_at"`
}

// ErrNoTenantConfig is what the config store answers for a tenant that has no
// quotas stored (never put, or deleted): the tenant is not unknown (every scope has
// one), it has no limit.
var ErrNoTenantConfig = errors.New("warmpool: the tenant has no quotas stored")

// TenantStore keeps tenants' quotas durably, beside the scope configs: every put and
// every delete is a new version of the tenant, and the old ones stay. Configs go in
// as package tenants normalized them and come out as they went in.
type TenantStore interface {
	// PutTenant stores cfg as the tenant's next version. Errors: VALIDATION (a bad
	// tenant id), STORE_UNAVAILABLE.
	PutTenant(ctx context.Context, tenant string, cfg TenantConfig) (StoredTenant, error)
	// GetTenant returns the tenant's latest version. Errors: ErrNoTenantConfig (none
	// stored, or deleted at its latest version), STORE_UNAVAILABLE.
	GetTenant(ctx context.Context, tenant string) (StoredTenant, error)
	// ListTenants returns the latest version of at most limit tenants with quotas, in
	// the order of their ids, after the id after ("" for the first). Errors:
	// STORE_UNAVAILABLE.
	ListTenants(ctx context.Context, after string, limit int) ([]StoredTenant, error)
	// DeleteTenant stores the tenant's next version as deleted and returns that
	// version. Errors: ErrNoTenantConfig (none stored, or deleted already),
	// STORE_UNAVAILABLE.
	DeleteTenant(ctx context.Context, tenant string) (int64, error)
}

// CheckTenantID returns a VALIDATION error unless id is a valid tenant id: a tenant id
// follows the rules of a scope id (SPEC §12.1).
func CheckTenantID(id string) error {
	if !ValidScopeID(id) {
		return Errorf(CodeValidation, "tenant: must match ^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")
	}
	return nil
}
