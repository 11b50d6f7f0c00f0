package bench

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
)

// results is a run whose plain routes have a p99 of 10 ms, all warm, and whose config
// routes have p99 and sources as given, nothing failed and nothing leaked.
func results(p99 float64, warm, deployed int) *SessionConfigResults {
	return &SessionConfigResults{
		Plain:    &RouteClass{Routes: 100, Sources: map[string]int{warmpool.SourceWarm: 100}, P99Ms: 10},
		Config:   &RouteClass{Routes: warm + deployed, Sources: map[string]int{warmpool.SourceWarm: warm, warmpool.SourceDeployed: deployed}, P99Ms: p99},
		Searched: []string{"/metrics", "replica log (debug)"},
		Leaks:    []string{},
	}
}

func TestSessionConfigVerdict(t *testing.T) {
	for _, c := range []struct {
		name string
		res  *SessionConfigResults
		want Verdict
	}{
		{"all met at the bounds", results(35, 95, 5), Verdict{Warm: true, P99: true, Fetched: true, NoLeak: true}},
		{"one route too many cold", results(12, 94, 6), Verdict{Warm: false, P99: true, Fetched: true, NoLeak: true}},
		{"p99 over plain + 25 ms", results(35.01, 100, 0), Verdict{Warm: true, P99: false, Fetched: true, NoLeak: true}},
		{"a fetch failed", func() *SessionConfigResults { r := results(12, 100, 0); r.Config.Failed = 1; return r }(),
			Verdict{Warm: true, P99: true, Fetched: false, NoLeak: true}},
		{"a fetch answered another env", func() *SessionConfigResults { r := results(12, 100, 0); r.Config.Wrong = 1; return r }(),
			Verdict{Warm: true, P99: true, Fetched: false, NoLeak: true}},
		{"the secret in the log", func() *SessionConfigResults {
			r := results(12, 100, 0)
			r.Leaks = []string{"replica log (debug)"}
			return r
		}(),
			Verdict{Warm: true, P99: true, Fetched: true, NoLeak: false}},
		{"nothing searched", func() *SessionConfigResults { r := results(12, 100, 0); r.Searched = nil; return r }(),
			Verdict{Warm: true, P99: true, Fetched: true, NoLeak: false}},
		{"no config routes", results(0, 0, 0), Verdict{NoLeak: true}},
	} {
		if got := c.res.Verdict(); got != c.want {
			t.Errorf("%s: verdict %+v, want %+v", c.name, got, c.want)
		}
		if got := c.res.Verdict().Met(); got != (c.want == Verdict{Warm: true, P99: true, Fetched: true, NoLeak: true}) {
			t.Errorf("%s: met = %v", c.name, got)
		}
	}
}

// A failed route is not warm, even when the replica's counters say more warm routes
// than the client saw answered (a window's counters include nothing else, but a
// share over 1 would hide the failures).
func TestWarmShareCountsFailedRoutesCold(t *testing.T) {
	r := &RouteClass{Routes: 20, Failed: 2, Sources: map[string]int{warmpool.SourceWarm: 18}}
	if got := r.WarmShare(); got != 0.9 {
		t.Errorf("warm share %v, want 0.9", got)
	}
	r.Sources[warmpool.SourceWarm] = 25
	if got := r.WarmShare(); got != 1 {
		t.Errorf("warm share %v, want at most 1", got)
	}
}

func TestLeaksNamesWhereTheSecretIs(t *testing.T) {
	searched, found := leaks(map[string][]byte{
		"replica log (debug)": []byte("level=INFO msg=route session=s1\nlevel=DEBUG value=wpbench-secret-ab12\n"),
		"/metrics":            []byte("warmpool_routes_total{scope=\"x\",source=\"warm\"} 3\n"),
	}, "wpbench-secret-ab12")
	if !slices.Equal(searched, []string{"/metrics", "replica log (debug)"}) || !slices.Equal(found, []string{"replica log (debug)"}) {
		t.Errorf("searched %v, found %v", searched, found)
	}
	if _, found := leaks(map[string][]byte{"/metrics": []byte("x 1\n")}, "wpbench-secret-ab12"); found == nil || len(found) != 0 {
		t.Errorf("found %#v in a clean page, want an empty list", found)
	}
}

// TestSessionConfigSmoke runs the measurement for seconds: both kinds of routes are
// measured, every config route's fetch answered its env with the secret resolved,
// and the secret is in neither the log nor /metrics.
func TestSessionConfigSmoke(t *testing.T) {
	bin, _ := smokeBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := SessionConfigs(ctx, SessionConfigBench{Bin: bin, RedisScript: "../../redis.sh", Dir: t.TempDir(),
		Delay: 500 * time.Millisecond, Rate: 20, Life: 300 * time.Millisecond, MinIdle: 2, Warmup: time.Second, Window: 1500 * time.Millisecond, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*RouteClass{"plain": res.Plain, "config": res.Config} {
		if c.Routes == 0 || c.Failed > 0 || c.Wrong > 0 || c.P99Ms <= 0 || c.Sources[warmpool.SourceWarm] == 0 {
			t.Errorf("%s routes: %+v", name, c)
		}
	}
	if res.Config.FetchP99Ms <= 0 || res.Plain.FetchP99Ms != 0 {
		t.Errorf("fetch p99: config %v, plain %v", res.Config.FetchP99Ms, res.Plain.FetchP99Ms)
	}
	if v := res.Verdict(); !v.Fetched || !v.NoLeak || len(res.LoadAvg) != 2 {
		t.Errorf("verdict %+v, searched %v, leaks %v, load %v", v, res.Searched, res.Leaks, res.LoadAvg)
	}
	var txt bytes.Buffer
	if err := res.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "| session_config |") || !strings.Contains(txt.String(), "config routes served warm") {
		t.Errorf("text:\n%s", txt.String())
	}
}
