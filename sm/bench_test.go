package sm_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/warmpool/warmpool/internal/testing/harness/replicatest"
	"github.com/warmpool/warmpool/internal/testing/testredis"
)

// BenchmarkRouteWarm measures routing a new session onto a warm pod with a free slot,
// the gateway's hot path, and reports its Redis round trips (the target is one). Each
// iteration ends the session again.
func BenchmarkRouteWarm(b *testing.B) {
	h := replicatest.New(b)
	h.Scope("bench", 64, 64)
	r := h.Replica(replicatest.Config{})
	m := r.SM
	ctx := context.Background()
	if _, err := m.Route(ctx, "bench", "warmup", ""); err != nil {
		b.Fatal(err)
	}
	counter := &testredis.Counter{}
	r.Client.AddHook(counter)
	var trips int64
	i := 0
	for b.Loop() {
		id := "s" + strconv.Itoa(i)
		i++
		before := counter.Count()
		bd, err := m.Route(ctx, "bench", id, "")
		trips += counter.Count() - before
		if err != nil || !bd.New {
			b.Fatalf("route = %+v, %v", bd, err)
		}
		if _, err := m.End(ctx, "bench", id); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/route")
}
