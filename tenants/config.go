package tenants

import (
	"errors"
	"fmt"
	"strings"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Bounds of a tenant config (SPEC §12.1).
const (
	// DefaultWeight is the weight of a tenant whose config names none, and of a
	// tenant without quotas.
	DefaultWeight = 1
	// MaxWeight is the largest weight.
	MaxWeight = 1000
	// MaxCount bounds max_pods, max_sessions and max_idle_pods.
	MaxCount = 1_000_000_000
)

// body is a PUT body as it decodes: a nil field was not given.
type body struct {
	MaxPods     *int64  `json:"max_pods"`
	MaxCPU      *string `json:"max_cpu"`
	MaxMemory   *string `json:"max_memory"`
	MaxSessions *int64  `json:"max_sessions"`
	MaxIdlePods *int64  `json:"max_idle_pods"`
	Weight      *int64  `json:"weight"`
}

// Decode reads a PUT /v1/tenants/{tenant} body strictly (as httpx.DecodeStrict does)
// and normalizes it: a field not given (or null) sets no limit, and weight is
// DefaultWeight when not given. Errors: VALIDATION naming every faulty field.
func Decode(doc []byte) (warmpool.TenantConfig, error) {
	var b body
	if err := httpx.DecodeStrict(doc, &b); err != nil {
		return warmpool.TenantConfig{}, err
	}
	cfg := warmpool.TenantConfig{MaxPods: b.MaxPods, MaxCPU: b.MaxCPU, MaxMemory: b.MaxMemory,
		MaxSessions: b.MaxSessions, MaxIdlePods: b.MaxIdlePods, Weight: DefaultWeight}
	if b.Weight != nil {
		cfg.Weight = *b.Weight
	}
	if err := Check(cfg); err != nil {
		return warmpool.TenantConfig{}, err
	}
	return cfg, nil
}

// Check refuses a config out of range with VALIDATION naming every faulty field.
func Check(cfg warmpool.TenantConfig) error {
	var faults []string
	bad := func(field, format string, args ...any) {
		faults = append(faults, field+": "+fmt.Sprintf(format, args...))
	}
	for _, c := range []struct {
		field string
		v     *int64
	}{{"max_pods", cfg.MaxPods}, {"max_sessions", cfg.MaxSessions}, {"max_idle_pods", cfg.MaxIdlePods}} {
		if c.v != nil && (*c.v < 0 || *c.v > MaxCount) {
			bad(c.field, "must be between 0 and %d, got %d", MaxCount, *c.v)
		}
	}
	if _, _, fault := quantity(cfg.MaxCPU, "such as 4 or 1500m"); fault != "" {
		bad("max_cpu", "%s", fault)
	}
	if _, _, fault := quantity(cfg.MaxMemory, "such as 8Gi or 512Mi"); fault != "" {
		bad("max_memory", "%s", fault)
	}
	if cfg.Weight < 1 || cfg.Weight > MaxWeight {
		bad("weight", "must be between 1 and %d, got %d", MaxWeight, cfg.Weight)
	}
	if len(faults) > 0 {
		return warmpool.Errorf(warmpool.CodeValidation, "%s", strings.Join(faults, "; "))
	}
	return nil
}

// quantity parses a quota given as a Kubernetes quantity (nil: no limit) into its
// thousandths and its whole units; a fault says what is wrong, with an example of
// the field's quantities.
func quantity(v *string, example string) (milli, whole int64, fault string) {
	if v == nil {
		return warmpool.NoLimit, warmpool.NoLimit, ""
	}
	milli, whole, err := warmpool.ParseQuantity(*v)
	switch {
	case errors.Is(err, warmpool.ErrQuantityNegative):
		return 0, 0, fmt.Sprintf("must not be negative, got %q", *v)
	case errors.Is(err, warmpool.ErrQuantityTooLarge):
		return 0, 0, fmt.Sprintf("%q is too large", *v)
	case err != nil:
		return 0, 0, fmt.Sprintf("must be a Kubernetes quantity %s, got %q", example, *v)
	}
	return milli, whole, ""
}

// Limits are the limits a checked config sets: CPU in millicores, memory in bytes,
// NoLimit for every field the config leaves out.
func Limits(cfg warmpool.TenantConfig) warmpool.TenantLimits {
	l := warmpool.Unlimited()
	l.Weight = cfg.Weight
	count := func(v *int64) int64 {
		if v == nil {
			return warmpool.NoLimit
		}
		return *v
	}
	l.Pods, l.Sessions, l.IdlePods = count(cfg.MaxPods), count(cfg.MaxSessions), count(cfg.MaxIdlePods)
	l.MilliCPU, _, _ = quantity(cfg.MaxCPU, "")
	_, l.MemoryBytes, _ = quantity(cfg.MaxMemory, "")
	return l
}

// Use is what a tenant's scopes hold, as GET /v1/tenants/{tenant} answers it: CPU and
// memory as Kubernetes quantities ("1500m", "3Gi").
type Use struct {
	Pods     int64  `json:"pods"`
	CPU      string `json:"cpu"`
	Memory   string `json:"memory"`
	Sessions int64  `json:"sessions"`
	IdlePods int64  `json:"idle_pods"`
}

// UseOf formats u.
func UseOf(u warmpool.TenantUse) Use {
	return Use{
		Pods:     u.Pods,
		CPU:      warmpool.FormatMilli(u.MilliCPU),
		Memory:   warmpool.FormatBytes(u.MemoryBytes),
		Sessions: u.Sessions,
		IdlePods: u.IdlePods,
	}
}
