package metrics_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/internal/testing/cputime"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
)

func newMetrics(t *testing.T, store *redisstore.Store, cfg metrics.Config) *metrics.Metrics {
	t.Helper()
	m, err := metrics.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func publish(t *testing.T, store *redisstore.Store, scope string) {
	t.Helper()
	cfg := warmpool.DefaultScopeConfig()
	if err := cfg.Normalize(); err != nil {
		t.Fatal(err)
	}
	rec := redisstore.ScopeRecord{ScopeID: scope, Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}
	if err := store.ScopePublish(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// TestDeletedScopeSeriesDropped checks that the series of a scope go once the scope is
// gone from Redis, so the label set stays one series set per live scope: the
// counters' and gauges', and the histograms' too when they carry the scope.
func TestDeletedScopeSeriesDropped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		detail string
		// series of the five names with both scopes, then with keep alone (the
		// histograms have one series each when they carry no scope), and the route
		// series once the scope is back.
		two, one, again int
	}{
		{"", 7, 5, 3},
		{"*", 10, 5, 4},
	} {
		t.Run("detail="+c.detail, func(t *testing.T) {
			t.Parallel()
			r := testredis.New(t)
			store := redisstore.NewStore(r.Client, r.Prefix)
			publish(t, store, "keep")
			publish(t, store, "gone")
			m := newMetrics(t, store, metrics.Config{ScopeDetail: c.detail})
			for _, scope := range []string{"keep", "gone"} {
				m.ObserveRoute(scope, warmpool.SourceWarm, "", time.Millisecond)
				m.ObserveDeploy(scope, "fake", "ok", time.Second)
				m.ObservePhase(scope, "fake", warmpool.PhaseReady, time.Second)
			}
			m.ObserveRoute("whatever", "", warmpool.CodeScopeNotFound, time.Millisecond)

			names := []string{"warmpool_routes_total", "warmpool_route_duration_seconds", "warmpool_deploy_duration_seconds",
				"warmpool_deploy_phase_seconds", "warmpool_max_pods"}
			count := func() int {
				n, err := testutil.GatherAndCount(m, names...)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := count(); n != c.two {
				t.Fatalf("%d series with two scopes, want %d", n, c.two)
			}
			// What a scope deletion leaves: the scope is no longer published.
			k := store.Keys()
			if err := r.Admin.SRem(context.Background(), k.Scopes(), "gone").Err(); err != nil {
				t.Fatal(err)
			}
			// The gathering that finds the scope gone drops its series first.
			if n := count(); n != c.one {
				t.Fatalf("%d series after one scope went, want %d", n, c.one)
			}
			fams, err := m.Gather()
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
			if n, err := testutil.GatherAndCount(m, "warmpool_route_errors_total"); err != nil || n != 1 {
				t.Errorf("route errors of unknown scopes: %d series (%v), want 1 under scope \"\"", n, err)
			}
			// A scope made again under the name has its route series back from its
			// first route: the dropped ones are not kept for it.
			publish(t, store, "gone")
			m.ObserveRoute("gone", warmpool.SourceWarm, "", time.Millisecond)
			if n, err := testutil.GatherAndCount(m, "warmpool_routes_total", "warmpool_route_duration_seconds"); err != nil || n != c.again {
				t.Errorf("%d route series (%v) after a route of the scope made again, want %d", n, err, c.again)
			}
		})
	}
}

// BenchmarkRender renders the metrics of 5,000 scopes, each with a route of two
// sources, as a scrape does once per Config.Share: the pool read, the text (in a
// buffer of the last rendering's size) and its gzip. cpu-ns/op is the process's CPU.
func BenchmarkRender(b *testing.B) {
	r := testredis.New(b)
	// Admin has none of the test hooks on its commands, as a replica's client.
	store := redisstore.NewStore(r.Admin, r.Prefix)
	m, err := metrics.New(store, metrics.Config{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := warmpool.DefaultScopeConfig()
	if err := cfg.Normalize(); err != nil {
		b.Fatal(err)
	}
	for i := range 5000 {
		scope := fmt.Sprintf("scope-%d", i)
		if err := store.ScopePublish(context.Background(), redisstore.ScopeRecord{ScopeID: scope, Config: cfg, Version: 1, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
			b.Fatal(err)
		}
		m.ObserveRoute(scope, warmpool.SourceDeployed, "", time.Second)
		m.ObserveRoute(scope, warmpool.SourceAffinity, "", time.Millisecond)
	}
	size := metrics.RenderSize(m, 0)
	runtime.GC()
	cpu := cputime.Now(b)
	for b.Loop() {
		if n := metrics.RenderSize(m, size); n < 5000*500 {
			b.Fatalf("%d bytes", n)
		}
	}
	cputime.Report(b, cpu)
}
