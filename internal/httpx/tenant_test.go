package httpx

import (
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

// A body decodes into the config stored: weight 1 when not given, no limit for every
// field not given or null, and the limits the scripts check in millicores and bytes.
func TestDecodeTenantConfig(t *testing.T) {
	cfg, err := DecodeTenantConfig([]byte(`{"max_pods":3,"max_cpu":"1.5","max_memory":"1Gi","max_sessions":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Weight != 1 || cfg.MaxSessions != nil || cfg.MaxIdlePods != nil || *cfg.MaxPods != 3 {
		t.Fatalf("decoded %+v", cfg)
	}
	want := warmpool.TenantLimits{Pods: 3, MilliCPU: 1500, MemoryBytes: 1 << 30, Sessions: warmpool.NoLimit, IdlePods: warmpool.NoLimit, Weight: 1}
	if got := cfg.Limits(); got != want {
		t.Fatalf("limits %+v, want %+v", got, want)
	}
	empty, err := DecodeTenantConfig([]byte(`{}`))
	if err != nil || empty.Limits() != warmpool.Unlimited() {
		t.Fatalf("an empty body: %+v, %v; want no limit", empty, err)
	}
	zero, err := DecodeTenantConfig([]byte(`{"max_idle_pods":0,"weight":1000}`))
	if err != nil || zero.Limits().IdlePods != 0 || zero.Weight != 1000 {
		t.Fatalf("a zero limit and the largest weight: %+v, %v", zero, err)
	}
	_, err = DecodeTenantConfig([]byte(`{"max_pods":-2,"max_memory":"lots","weight":0}`))
	for _, field := range []string{"max_pods", "max_memory", "weight"} {
		if warmpool.ErrorCode(err) != warmpool.CodeValidation || !strings.Contains(err.Error(), field) {
			t.Errorf("a body bad in three fields: %v, want VALIDATION naming %s", err, field)
		}
	}
	for _, doc := range []string{`{"color":"red"}`, `{"Weight":2}`, `{"weight":1,"weight":2}`, `{"max_cpu":4}`, `[]`, `{"max_pods":1`} {
		if _, err := DecodeTenantConfig([]byte(doc)); warmpool.ErrorCode(err) != warmpool.CodeValidation {
			t.Errorf("DecodeTenantConfig(%s) = %v, want VALIDATION", doc, err)
		}
	}
}

// FuzzDecodeTenantConfig: whatever the body, a config comes back valid or the error
// is a VALIDATION.
func FuzzDecodeTenantConfig(f *testing.F) {
	for _, seed := range []string{`{}`, `{"max_cpu":"1500m","weight":3}`, `{"max_memory":"9E"}`, `{"max_pods":null}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		cfg, err := DecodeTenantConfig(doc)
		if err != nil {
			if warmpool.ErrorCode(err) != warmpool.CodeValidation {
				t.Fatalf("DecodeTenantConfig(%q) = %v, want VALIDATION", doc, err)
			}
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("decoded %+v, which does not validate: %v", cfg, err)
		}
	})
}
