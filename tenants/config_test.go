package tenants_test

import (
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/tenants"
)

// A body decodes into the config stored: weight 1 when not given, no limit for every
// field not given or null, and the limits the scripts check in millicores and bytes.
func TestDecodeAndLimits(t *testing.T) {
	cfg, err := tenants.Decode([]byte(`{"max_pods":3,"max_cpu":"1.5","max_memory":"1Gi","max_sessions":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Weight != 1 || cfg.MaxSessions != nil || cfg.MaxIdlePods != nil || *cfg.MaxPods != 3 {
		t.Fatalf("decoded %+v", cfg)
	}
	want := warmpool.TenantLimits{Pods: 3, MilliCPU: 1500, MemoryBytes: 1 << 30, Sessions: warmpool.NoLimit, IdlePods: warmpool.NoLimit, Weight: 1}
	if got := tenants.Limits(cfg); got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
	empty, err := tenants.Decode([]byte(`{}`))
	if err != nil || tenants.Limits(empty) != warmpool.Unlimited() {
		t.Fatalf("an empty body: %+v, %v; want no limit", empty, err)
	}
	zero, err := tenants.Decode([]byte(`{"max_idle_pods":0,"weight":1000}`))
	if err != nil || tenants.Limits(zero).IdlePods != 0 || zero.Weight != 1000 {
		t.Fatalf("a zero limit and the largest weight: %+v, %v", zero, err)
	}
	_, err = tenants.Decode([]byte(`{"max_pods":-2,"max_memory":"lots","weight":0}`))
	for _, field := range []string{"max_pods", "max_memory", "weight"} {
		if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), field) {
			t.Errorf("a body bad in three fields: %v, want VALIDATION naming %s", err, field)
		}
	}
	if _, err := tenants.Decode([]byte(`{"color":"red"}`)); warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), "color") {
		t.Errorf("an unknown field: %v, want VALIDATION naming it", err)
	}
}

// Use is written as Kubernetes quantities.
func TestUseOf(t *testing.T) {
	got := tenants.UseOf(warmpool.TenantUse{Pods: 3, MilliCPU: 1500, MemoryBytes: 3 << 29, Sessions: 4, IdlePods: 1, Scopes: 2})
	if got != (tenants.Use{Pods: 3, CPU: "1500m", Memory: "1536Mi", Sessions: 4, IdlePods: 1}) {
		t.Fatalf("UseOf = %+v", got)
	}
}
