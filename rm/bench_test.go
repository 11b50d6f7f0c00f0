package rm_test

import (
	"context"
	"testing"

	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/rm"
)

// BenchmarkAcquireWarm measures handing out a warm pod (and reports the Redis round
// trips each acquire costs; the target is one). Each iteration gives the pod back.
func BenchmarkAcquireWarm(b *testing.B) {
	h := newHarness(b)
	h.scope("s", 8, 2)
	m := rm.New(h.store, h.fake, rm.Config{})
	defer m.Close()
	ctx := context.Background()
	first, err := m.Acquire(ctx, "s", "")
	if err != nil {
		b.Fatal(err)
	}
	if err := m.ReleaseClaim(ctx, "s", first.Claim, true); err != nil {
		b.Fatal(err)
	}
	counter := &testredis.Counter{}
	h.r.Client.AddHook(counter)
	var trips int64
	b.ResetTimer()
	for b.Loop() {
		before := counter.Count()
		l, err := m.Acquire(ctx, "s", "")
		trips += counter.Count() - before
		if err != nil || l.Source != "warm" {
			b.Fatalf("acquire = %+v, %v", l, err)
		}
		if err := m.ReleaseClaim(ctx, "s", l.Claim, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/acquire")
}

// BenchmarkAcquireCold measures a cold acquire with a zero-delay fake driver: lease,
// deploy, register; each iteration purges the pod again so the next one is cold too.
func BenchmarkAcquireCold(b *testing.B) {
	h := newHarness(b)
	h.scope("s", 8, 2)
	m := rm.New(h.store, h.fake, rm.Config{})
	defer m.Close()
	ctx := context.Background()
	for b.Loop() {
		l, err := m.Acquire(ctx, "s", "")
		if err != nil || l.Source != "deployed" {
			b.Fatalf("acquire = %+v, %v", l, err)
		}
		if _, err := m.Purge(ctx, "s", l.Pod.ID, "bench"); err != nil {
			b.Fatal(err)
		}
		if err := h.fake.Delete(ctx, l.Pod); err != nil {
			b.Fatal(err)
		}
	}
}
