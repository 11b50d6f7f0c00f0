package warmpool

import (
	"errors"
	"fmt"
	"strings"
)

// Bounds of a tenant config (SPEC §12.1), decided once here.
const (
	// DefaultTenantWeight is the weight of a tenant whose config names none, and of a
	// tenant without quotas.
	DefaultTenantWeight = 1
	// MaxTenantWeight is the largest weight.
	MaxTenantWeight = 1000
	// MaxTenantCount bounds max_pods, max_sessions and max_idle_pods.
	MaxTenantCount = 1_000_000_000
)

// Validate refuses a config out of range with VALIDATION naming every faulty field.
func (c TenantConfig) Validate() error {
	var faults []string
	bad := func(field, format string, args ...any) {
		faults = append(faults, field+": "+fmt.Sprintf(format, args...))
	}
	for _, f := range []struct {
		field string
		v     *int64
	}{{"max_pods", c.MaxPods}, {"max_sessions", c.MaxSessions}, {"max_idle_pods", c.MaxIdlePods}} {
		if f.v != nil && (*f.v < 0 || *f.v > MaxTenantCount) {
			bad(f.field, "must be between 0 and %d, got %d", MaxTenantCount, *f.v)
		}
	}
	if _, _, fault := quota(c.MaxCPU, "such as 4 or 1500m"); fault != "" {
		bad("max_cpu", "%s", fault)
	}
	if _, _, fault := quota(c.MaxMemory, "such as 8Gi or 512Mi"); fault != "" {
		bad("max_memory", "%s", fault)
	}
	if c.Weight < 1 || c.Weight > MaxTenantWeight {
		bad("weight", "must be between 1 and %d, got %d", MaxTenantWeight, c.Weight)
	}
	if len(faults) > 0 {
		return Errorf(CodeValidation, "%s", strings.Join(faults, "; "))
	}
	return nil
}

// quota parses a quota given as a Kubernetes quantity (nil: no limit) into its
// thousandths and its whole units; a fault says what is wrong, with an example of
// the field's quantities.
func quota(v *string, example string) (milli, whole int64, fault string) {
	if v == nil {
		return NoLimit, NoLimit, ""
	}
	milli, whole, err := ParseQuantity(*v)
	switch {
	case errors.Is(err, ErrQuantityNegative):
		return 0, 0, fmt.Sprintf("must not be negative, got %q", *v)
	case errors.Is(err, ErrQuantityTooLarge):
		return 0, 0, fmt.Sprintf("%q is too large", *v)
	case err != nil:
		return 0, 0, fmt.Sprintf("must be a Kubernetes quantity %s, got %q", example, *v)
	}
	return milli, whole, ""
}

// Limits are the limits a validated config sets: CPU in millicores, memory in bytes,
// NoLimit for every field the config leaves out.
func (c TenantConfig) Limits() TenantLimits {
	l := Unlimited()
	l.Weight = c.Weight
	count := func(v *int64) int64 {
		if v == nil {
			return NoLimit
		}
		return *v
	}
	l.Pods, l.Sessions, l.IdlePods = count(c.MaxPods), count(c.MaxSessions), count(c.MaxIdlePods)
	l.MilliCPU, _, _ = quota(c.MaxCPU, "")
	_, l.MemoryBytes, _ = quota(c.MaxMemory, "")
	return l
}
