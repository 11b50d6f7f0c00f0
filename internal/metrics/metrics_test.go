package metrics_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/lua"
)

func publish(t *testing.T, store *lua.Store, scope string) {
	t.Helper()
	cfg := warmpool.DefaultScopeConfig()
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	rec := lua.ScopeRecord{ScopeID: scope, Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}
	if err := store.ScopePublish(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// TestDeletedScopeSeriesDropped checks that the series of a scope go once the scope is
// gone from Redis, so the label set stays one series set per live scope.
func TestDeletedScopeSeriesDropped(t *testing.T) {
	t.Parallel()
	r := testredis.New(t)
	store := lua.NewStore(r.Client, r.Prefix)
	publish(t, store, "keep")
	publish(t, store, "gone")
	m := metrics.New(store, slog.New(slog.DiscardHandler))
	for _, scope := range []string{"keep", "gone"} {
		m.ObserveRoute(scope, warmpool.SourceWarm, "", time.Millisecond)
		m.ObserveDeploy(scope, "fake", "ok", time.Second)
		m.ObservePhase(scope, "fake", warmpool.PhaseReady, time.Second)
	}
	m.ObserveRoute("whatever", "", warmpool.CodeScopeNotFound, time.Millisecond)

	names := []string{"warmpool_routes_total", "warmpool_route_duration_seconds", "warmpool_deploy_duration_seconds",
		"warmpool_deploy_phase_seconds", "warmpool_max_pods"}
	count := func() int {
		n, err := testutil.GatherAndCount(m.Registry(), names...)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n != 10 {
		t.Fatalf("%d series with two scopes, want 10", n)
	}
	// What a scope deletion leaves: the scope is no longer published.
	k := store.Keys()
	if err := r.Admin.SRem(context.Background(), k.Scopes(), "gone").Err(); err != nil {
		t.Fatal(err)
	}
	count() // the scrape that finds the scope gone drops its series
	if n := count(); n != 5 {
		t.Fatalf("%d series after one scope went, want 5", n)
	}
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "scope" && l.GetValue() == "gone" {
					t.Errorf("%s keeps a series of the deleted scope", f.GetName())
				}
			}
		}
	}
	if n, err := testutil.GatherAndCount(m.Registry(), "warmpool_route_errors_total"); err != nil || n != 1 {
		t.Errorf("route errors of unknown scopes: %d series (%v), want 1 under scope \"\"", n, err)
	}
	// A scope made again under the name has its route series back from its first
	// route: the dropped ones are not kept for it.
	publish(t, store, "gone")
	m.ObserveRoute("gone", warmpool.SourceWarm, "", time.Millisecond)
	if n, err := testutil.GatherAndCount(m.Registry(), "warmpool_routes_total", "warmpool_route_duration_seconds"); err != nil || n != 4 {
		t.Errorf("%d route series (%v) after a route of the scope made again, want 4", n, err)
	}
}
