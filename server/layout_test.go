package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/server"
)

// A keyspace an older release wrote (its scopes without the indexes, no layout mark)
// gets every scope's indexes before a new replica serves: the warm pod with a free slot
// takes the next session (no deploy), and the indexes equal what they index. A
// keyspace this release bootstrapped carries the mark, so no index pass runs.
func TestBootstrapBuildsTheIndexesOfAnOlderKeyspace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := testserver.NewBacking(t)
	srvA, tsA := testserver.Serve(t, b.Config("replica-a"))
	a := &env{t: t, srv: srvA, ts: tsA, r: b.Redis, fake: b.Fake, client: &http.Client{Timeout: 30 * time.Second}}
	a.putScope("old", scopeCfg(4, 2, 0, 1))
	pod := a.route("old", "s1")["pod_id"].(string)
	layout := b.Redis.Prefix + "layout"
	indexPasses := func(srv *server.Server) float64 {
		return sample(t, srv.Metrics(), "warmpool_sweeper_runs_total", map[string]string{"sweep": "index", "outcome": "ok"})
	}
	if v, err := b.Redis.Client.Get(ctx, layout).Result(); err != nil || v == "" || indexPasses(srvA) != 0 {
		t.Fatalf("a bootstrapped keyspace: layout mark %q (%v), %v index passes; want the mark and none", v, err, indexPasses(srvA))
	}

	k := srvA.Store().Keys().Scope("old")
	for _, key := range []string{layout, k.Free, k.FreePrev, k.Warm, k.WarmPrev, k.Busy, k.Surplus, k.PodSess, k.PodClaims, k.Rooms, k.Open} {
		if err := b.Redis.Client.Del(ctx, key).Err(); err != nil {
			t.Fatal(err)
		}
	}
	srvB, tsB := testserver.Serve(t, b.Config("replica-b"))
	if v, err := invariant.Indexes(ctx, b.Redis.Client, k); err != nil || len(v) > 0 {
		t.Fatalf("indexes after the new replica started: %v, %v", v, err)
	}
	if v, err := b.Redis.Client.Get(ctx, layout).Result(); err != nil || v == "" || indexPasses(srvB) != 1 {
		t.Fatalf("after the new replica started: layout mark %q (%v), %v index passes; want the mark and one", v, err, indexPasses(srvB))
	}
	other := &env{t: t, srv: srvB, ts: tsB, r: b.Redis, fake: b.Fake, client: &http.Client{Timeout: 30 * time.Second}}
	deploys := b.Fake.DeployCount()
	if got := other.route("old", "s2")["pod_id"]; got != pod || b.Fake.DeployCount() != deploys {
		t.Fatalf("s2 after the upgrade: on %v after %d deploys (%d before), want the free slot of %s", got, b.Fake.DeployCount(), deploys, pod)
	}
}
