package server_test

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/await"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/internal/testserver"
	"github.com/warmpool/warmpool/k8s/fakepod"
	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sweeper"
)

// sample reads the metric name with exactly labels from g: a counter's or a gauge's
// value, or a histogram's count of observations. A series that is absent reads 0.
func sample(tb testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	tb.Helper()
	fams, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !sameLabels(m.GetLabel(), labels) {
				continue
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount())
			}
			tb.Fatalf("%s: type %v not read here", name, f.GetType())
		}
	}
	return 0
}

func sameLabels(have []*dto.LabelPair, want map[string]string) bool {
	if len(have) != len(want) {
		return false
	}
	for _, l := range have {
		if v, ok := want[l.GetName()]; !ok || v != l.GetValue() {
			return false
		}
	}
	return true
}

// labelValues lists the values label takes in the series of name.
func labelValues(tb testing.TB, g prometheus.Gatherer, name, label string) []string {
	tb.Helper()
	fams, err := g.Gather()
	if err != nil {
		tb.Fatalf("gather: %v", err)
	}
	set := map[string]bool{}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					set[l.GetValue()] = true
				}
			}
		}
	}
	out := make([]string, 0, len(set))
	for v := range set {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// TestRouteMetrics drives a route of every source through the HTTP API on the fake
// driver, one by one, and checks the counters, histograms and gauges they leave.
func TestRouteMetrics(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	g := e.srv.Metrics()
	e.putScope("obs", scopeCfg(4, 2, 2, 10)) // max_pods 2, two sessions a pod

	e.route("obs", "s1") // cold: deployed
	e.route("obs", "s1") // bound: affinity
	e.route("obs", "s2") // the pod's free slot: warm

	// s3 leads a deploy that is held; s4 joins it as its follower.
	release := e.fake.Hold()
	var wg sync.WaitGroup
	routeAsync := func(session string) {
		wg.Add(1)
		go func() { defer wg.Done(); e.route("obs", session) }()
	}
	routeAsync("s3")
	await.True(t, 5*time.Second, "the second deploy starts", func() bool { return e.fake.InFlight() == 1 })
	routeAsync("s4")
	await.True(t, 5*time.Second, "s4 follows the deploy", func() bool { return num(t, e.pool("obs"), "followers") == 1 })
	checkGauges(t, g, "obs", "while s3's deploy runs with s4 its follower", map[string]float64{"warmpool_placeholders": 1, "warmpool_followers": 1, "warmpool_waiters": 0})
	release()
	wg.Wait()

	// Both pods are full and the scope is at max_pods: s5 waits in the queue until
	// s1 ends.
	routeAsync("s5")
	await.True(t, 5*time.Second, "s5 queues", func() bool { return num(t, e.pool("obs"), "waiters") == 1 })
	checkGauges(t, g, "obs", "while s5 waits", map[string]float64{"warmpool_placeholders": 0, "warmpool_followers": 0, "warmpool_waiters": 1})
	e.ok(http.MethodDelete, "/v1/scopes/obs/sessions/s1", nil)
	wg.Wait()
	e.do(http.MethodPost, "/v1/scopes/nope/sessions", `{"session_id":"x"}`) // SCOPE_NOT_FOUND

	for _, source := range []string{"affinity", "warm", "follower", "deployed", "queued"} {
		want := 1.0
		if source == "deployed" {
			want = 2 // s1 and s3
		}
		labels := map[string]string{"scope": "obs", "source": source}
		if got := sample(t, g, "warmpool_routes_total", labels); got != want {
			t.Errorf("warmpool_routes_total%v = %v, want %v", labels, got, want)
		}
		if got := sample(t, g, "warmpool_route_duration_seconds", labels); got != want {
			t.Errorf("warmpool_route_duration_seconds%v counts %v, want %v", labels, got, want)
		}
	}
	if got := sample(t, g, "warmpool_route_errors_total", map[string]string{"scope": "", "code": "SCOPE_NOT_FOUND"}); got != 1 {
		t.Errorf("an unknown scope's route counts %v errors under scope \"\", want 1", got)
	}
	if got := labelValues(t, g, "warmpool_route_errors_total", "scope"); strings.Join(got, ",") != "" {
		t.Errorf("route errors are labelled with scopes %q; an unknown scope must not get a series", got)
	}

	fake := func(kv ...string) map[string]string {
		m := map[string]string{"scope": "obs", "driver": "fake"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	if got := sample(t, g, "warmpool_deploy_duration_seconds", fake("result", "ok")); got != 2 {
		t.Errorf("deploys recorded: %v, want 2", got)
	}
	for _, phase := range []string{"lease_wait", "create", "ready"} {
		if got := sample(t, g, "warmpool_deploy_phase_seconds", fake("phase", phase)); got != 2 {
			t.Errorf("deploy phase %s recorded %v times, want 2", phase, got)
		}
	}
	scripts := labelValues(t, g, "warmpool_redis_script_duration_seconds", "script")
	for _, want := range []string{"session_route", "pod_acquire", "pod_register", "session_end"} {
		if !contains(scripts, want) {
			t.Errorf("no script latency of %s among %q", want, scripts)
		}
	}

	gauges := map[string]float64{
		`warmpool_pods{scope="obs",state="busy"}`:                 2,
		`warmpool_pods{scope="obs",state="idle"}`:                 0,
		`warmpool_pods_by_version{scope="obs",version="current"}`: 2,
		`warmpool_pods_by_version{scope="obs",version="old"}`:     0,
		`warmpool_sessions{scope="obs"}`:                          4,
		`warmpool_followers{scope="obs"}`:                         0,
		`warmpool_placeholders{scope="obs"}`:                      0,
		`warmpool_waiters{scope="obs"}`:                           0,
		`warmpool_max_pods{scope="obs"}`:                          2,
	}
	for series, want := range gauges {
		name, labels := parseSeries(t, series)
		if got := sample(t, g, name, labels); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}
	if n, err := testutil.GatherAndCount(g, "warmpool_build_info"); err != nil || n != 1 {
		t.Errorf("warmpool_build_info: %d series (%v), want 1", n, err)
	}
	build := map[string]string{"version": metrics.Version(), "goversion": runtime.Version()}
	if got := sample(t, g, "warmpool_build_info", build); got != 1 {
		t.Errorf("warmpool_build_info%v = %v, want 1", build, got)
	}
}

// checkGauges compares the scope's gauges of a scrape now with want.
func checkGauges(tb testing.TB, g prometheus.Gatherer, scope, when string, want map[string]float64) {
	tb.Helper()
	for name, v := range want {
		if got := sample(tb, g, name, map[string]string{"scope": scope}); got != v {
			tb.Errorf("%s: %s{scope=%q} = %v, want %v", when, name, scope, got, v)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// parseSeries splits `name{a="x",b="y"}` into its name and labels.
func parseSeries(tb testing.TB, s string) (string, map[string]string) {
	tb.Helper()
	name, rest, ok := strings.Cut(s, "{")
	if !ok {
		return s, map[string]string{}
	}
	labels := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "}"), ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			tb.Fatalf("bad series %q", s)
		}
		labels[k] = strings.Trim(v, `"`)
	}
	return name, labels
}

// TestSweeperMetrics runs the due job of the scope's shard once it has an idle pod past
// pod_ttl_s and checks its run, its lock hold time and its fix, counted under the job's
// name.
func TestSweeperMetrics(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	g := e.srv.Metrics()
	e.putScope("sw", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":2,"pod_concurrency":1,"pod_ttl_s":1}}`)
	e.route("sw", "s1")
	e.ok(http.MethodDelete, "/v1/scopes/sw/sessions/s1", nil)
	e.clock.Advance(2 * time.Second)
	job := sweeper.DueJobName(lua.DueShard("sw"))
	for _, j := range e.srv.Sweeper.Jobs() {
		if j.Name == job && !e.srv.Runner.RunOnce(context.Background(), j) {
			t.Fatal("the due job did not run")
		}
	}
	for name, labels := range map[string]map[string]string{
		"warmpool_sweeper_runs_total":        {"sweep": job, "outcome": "ok"},
		"warmpool_sweeper_lock_held_seconds": {"sweep": job},
		"warmpool_sweeper_fixes_total":       {"sweep": job, "fix": "reclaimed"},
	} {
		if got := sample(t, g, name, labels); got != 1 {
			t.Errorf("%s%v = %v, want 1", name, labels, got)
		}
	}
	if got := sample(t, g, "warmpool_pods", map[string]string{"scope": "sw", "state": "idle"}); got != 0 {
		t.Errorf("idle pods after the reclaim: %v, want 0", got)
	}
}

// TestRegisteredDriver builds the pod driver from a factory of Config.Drivers, as
// cmd/warmpool does for "kubernetes": the factory gets the replica's clock, the deploy
// metrics carry the registered name, and an unknown name lists the registered ones.
func TestRegisteredDriver(t *testing.T) {
	t.Parallel()
	var gotClock warmpool.Clock
	registered := func(c *server.Config) {
		c.Driver, c.DriverName = nil, "inmemory"
		c.Drivers = map[string]server.DriverFactory{"inmemory": func(log *slog.Logger, clock warmpool.Clock) (warmpool.PodDriver, error) {
			if log == nil {
				t.Error("the driver factory got no logger")
			}
			gotClock = clock
			return fakepod.New(), nil
		}}
	}
	e := mustEnv(t, registered)
	if gotClock != warmpool.Clock(e.clock) {
		t.Errorf("the driver factory got clock %v, want the replica's", gotClock)
	}
	e.putScope("reg", scopeCfg(4, 1, 2, 10))
	e.route("reg", "s1")
	labels := map[string]string{"scope": "reg", "driver": "inmemory", "result": "ok"}
	if got := sample(t, e.srv.Metrics(), "warmpool_deploy_duration_seconds", labels); got != 1 {
		t.Errorf("deploys recorded under %v: %v, want 1", labels, got)
	}

	cfg := testserver.NewBacking(t).Config("unknown-driver")
	registered(&cfg)
	cfg.DriverName = "kubernetes"
	_, err := server.New(context.Background(), cfg)
	if want := `--driver "kubernetes": want local, inmemory or fake`; err == nil || err.Error() != want {
		t.Errorf("an unregistered driver: err %v, want %q", err, want)
	}
}
