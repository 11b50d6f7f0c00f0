package bench

import (
	"strings"
	"testing"
)

// The table compares each operation with the smallest size at its pod_concurrency and
// says whether the targets are met: commands within 1.2 ×, Redis CPU within 1.5 ×.
func TestBigScopeTableComparesWithTheSmallestSize(t *testing.T) {
	res := &BigScopeResults{Rows: []BigScopeRow{
		{Pods: 10, PodConcurrency: 1, Ops: []OpRow{{Name: opWarmRoute, Ops: 10, Commands: 30, RedisUs: 100}}},
		{Pods: 10000, PodConcurrency: 1, Ops: []OpRow{{Name: opWarmRoute, Ops: 10, Commands: 39, RedisUs: 140}}},
		{Pods: 10, PodConcurrency: 8, Ops: []OpRow{{Name: opWarmRoute, Ops: 10, Commands: 10, RedisUs: 100}}},
		{Pods: 10000, PodConcurrency: 8, Ops: []OpRow{{Name: opWarmRoute, Ops: 10, Commands: 11, RedisUs: 160}}},
	}, Bursts: []BurstRow{{Rate: 2000, PodConcurrency: 1, Routes: 10, Status: map[int]int{200: 6, 503: 3, 500: 1}}},
		Idle: &IdleRow{Pods: 10000, Seconds: 60, CommandsPerS: 51, RedisCore: 0.005, ReplicaCore: 0.01}}
	var b strings.Builder
	if err := res.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"1.30 missed", "1.40 met", "1.10 met", "1.60 missed",
		"51.0 Redis commands/s (missed)", "Redis 0.50% and the replica 1.00% of a core (met)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if n := res.Bursts[0].Server5xx(); n != 4 {
		t.Errorf("Server5xx = %d, want the 503s and the 500", n)
	}
}
