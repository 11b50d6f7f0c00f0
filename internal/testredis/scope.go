package testredis

import (
	"testing"

	"github.com/warmpool/warmpool"
)

// ScopeConfig is the scope config tests start from: every default, max_concurrency mc,
// pod_concurrency pc, a 10s ready timeout, then mutate; normalised.
func ScopeConfig(tb testing.TB, mc, pc int, mutate ...func(*warmpool.ScopeConfig)) warmpool.ScopeConfig {
	tb.Helper()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = mc, pc
	cfg.Deploy.ReadyTimeoutS = 10
	for _, f := range mutate {
		f(&cfg)
	}
	if err := cfg.Normalize(); err != nil {
		tb.Fatal(err)
	}
	return cfg
}
