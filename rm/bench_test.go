package rm_test

import (
	"context"
	"testing"

	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// benchReplica is one replica on a scope "s" (max_concurrency 8, pod_concurrency 2).
func benchReplica(b *testing.B) (*replicatest.Harness, *replicatest.Replica) {
	h := replicatest.New(b)
	h.Scope("s", 8, 2)
	return h, h.Replica(replicatest.Config{})
}

// BenchmarkAcquireWarm measures handing out a warm pod (and reports the Redis round
// trips each acquire costs; the target is one). Each iteration gives the pod back.
func BenchmarkAcquireWarm(b *testing.B) {
	_, r := benchReplica(b)
	m := r.RM
	ctx := context.Background()
	first, err := m.Acquire(ctx, "s")
	if err != nil {
		b.Fatal(err)
	}
	if err := m.ReleaseClaim(ctx, "s", first.Claim); err != nil {
		b.Fatal(err)
	}
	counter := &testredis.Counter{}
	r.Client.AddHook(counter)
	var trips int64
	b.ResetTimer()
	for b.Loop() {
		before := counter.Count()
		l, err := m.Acquire(ctx, "s")
		trips += counter.Count() - before
		if err != nil || l.Source != "warm" {
			b.Fatalf("acquire = %+v, %v", l, err)
		}
		if err := m.ReleaseClaim(ctx, "s", l.Claim); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/acquire")
}

// BenchmarkAcquireCold measures a cold acquire with a zero-delay fake driver: lease,
// deploy, register; each iteration purges the pod again so the next one is cold too.
func BenchmarkAcquireCold(b *testing.B) {
	h, r := benchReplica(b)
	m := r.RM
	ctx := context.Background()
	for b.Loop() {
		l, err := m.Acquire(ctx, "s")
		if err != nil || l.Source != "deployed" {
			b.Fatalf("acquire = %+v, %v", l, err)
		}
		if _, err := m.Purge(ctx, "s", l.Pod.ID, "bench"); err != nil {
			b.Fatal(err)
		}
		if err := h.Fake.Delete(ctx, l.Pod); err != nil {
			b.Fatal(err)
		}
	}
}
