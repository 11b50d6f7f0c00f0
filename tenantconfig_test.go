package warmpool

import (
	"strings"
	"testing"
)

// Validate holds every field to its bounds, names every fault at once, and Limits
// turns quantities into millicores and bytes.
func TestTenantConfigValidate(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	q := func(v string) *string { return &v }
	for _, c := range []struct {
		cfg   TenantConfig
		fault string
	}{
		{TenantConfig{Weight: 1}, ""},
		{TenantConfig{Weight: 1000, MaxPods: n(0), MaxSessions: n(MaxTenantCount), MaxCPU: q("1500m"), MaxMemory: q("8Gi")}, ""},
		{TenantConfig{Weight: 0}, "weight: must be between 1 and 1000, got 0"},
		{TenantConfig{Weight: 1001}, "weight"},
		{TenantConfig{Weight: 1, MaxPods: n(-1)}, "max_pods: must be between 0"},
		{TenantConfig{Weight: 1, MaxIdlePods: n(MaxTenantCount + 1)}, "max_idle_pods"},
		{TenantConfig{Weight: 1, MaxCPU: q("lots")}, "max_cpu: must be a Kubernetes quantity"},
		{TenantConfig{Weight: 1, MaxCPU: q("-1")}, "max_cpu: must not be negative"},
		{TenantConfig{Weight: 1, MaxMemory: q("9E")}, "max_memory: \"9E\" is too large"},
	} {
		err := c.cfg.Validate()
		switch {
		case c.fault == "" && err != nil:
			t.Errorf("Validate(%+v) = %v, want nil", c.cfg, err)
		case c.fault != "" && (ErrorCode(err) != CodeValidation || !strings.Contains(err.Error(), c.fault)):
			t.Errorf("Validate(%+v) = %v, want VALIDATION naming %q", c.cfg, err, c.fault)
		}
	}
	both := TenantConfig{Weight: 0, MaxCPU: q("x")}.Validate()
	if both == nil || !strings.Contains(both.Error(), "max_cpu") || !strings.Contains(both.Error(), "weight") {
		t.Errorf("two faults: %v, want both named", both)
	}
	got := TenantConfig{Weight: 2, MaxCPU: q("0.5"), MaxMemory: q("1.5Gi"), MaxSessions: n(7)}.Limits()
	want := TenantLimits{Pods: NoLimit, MilliCPU: 500, MemoryBytes: 3 << 29, Sessions: 7, IdlePods: NoLimit, Weight: 2}
	if got != want {
		t.Errorf("Limits = %+v, want %+v", got, want)
	}
}

// A tenant's use is written as Kubernetes quantities.
func TestTenantUseView(t *testing.T) {
	got := TenantUse{Pods: 3, MilliCPU: 1500, MemoryBytes: 3 << 29, Sessions: 4, IdlePods: 1, Scopes: 2}.View()
	if got != (TenantUseView{Pods: 3, CPU: "1500m", Memory: "1536Mi", Sessions: 4, IdlePods: 1}) {
		t.Fatalf("View = %+v", got)
	}
}
