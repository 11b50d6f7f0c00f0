package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/sweeper"
)

// testServer is one complete replica in process: the test Redis, a fake driver with
// a deploy delay, SQLite in memory, its background jobs (autoscale makes the warm
// pods) on a short interval, served over loopback by httptest.
type testServer struct {
	url  string
	fake *fake.Driver
}

func newTestServer(t *testing.T, deployDelay time.Duration) *testServer {
	t.Helper()
	b := testserver.NewBacking(t)
	b.Fake.DeployDelay = deployDelay
	cfg := b.Config("loadtest-replica")
	cfg.Sweep = sweeper.Config{Interval: 50 * time.Millisecond}
	srv, ts := testserver.Serve(t, cfg)
	jobs, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.Runner.Run(jobs) }()
	t.Cleanup(func() {
		stop()
		wg.Wait()
	})
	return &testServer{url: ts.URL, fake: b.Fake}
}

// run runs cfg against the server and checks what holds for every scenario.
func run(t *testing.T, s *testServer, cfg Config) *Results {
	t.Helper()
	cfg.Server = s.url
	cfg.ProgressEvery = -1
	var progress bytes.Buffer
	res, err := Run(context.Background(), cfg, &progress)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(res.Scenarios) != len(cfg.Scenarios) {
		t.Fatalf("%d scenario results, want %d", len(res.Scenarios), len(cfg.Scenarios))
	}
	for _, sr := range res.Scenarios {
		checkAccounting(t, sr)
		if !strings.Contains(progress.String(), sr.Name+" ") {
			t.Errorf("no summary line for %s in the progress stream:\n%s", sr.Name, progress.String())
		}
	}
	checkReports(t, res)
	return res
}

// checkAccounting: the counts of one scenario add up every way they are reported.
func checkAccounting(t *testing.T, sr *ScenarioResult) {
	t.Helper()
	var total, notOK int
	for _, c := range sr.Calls {
		total += c.Count
		notOK += c.Count - c.OK
		sum := func(m map[string]int) int {
			n := 0
			for _, v := range m {
				n += v
			}
			return n
		}
		if n := sum(c.Outcomes); n != c.Count {
			t.Errorf("%s %s: outcomes add up to %d, count %d", sr.Name, c.Kind, n, c.Count)
		}
		if n := sum(c.Status); n != c.Count {
			t.Errorf("%s %s: status counts add up to %d, count %d", sr.Name, c.Kind, n, c.Count)
		}
		if c.Status["200"] != c.OK {
			t.Errorf("%s %s: %d answered 200, %d ok", sr.Name, c.Kind, c.Status["200"], c.OK)
		}
		var inHist uint64
		for _, b := range c.Histogram {
			inHist += b.Count
		}
		if int(inHist) != c.Count {
			t.Errorf("%s %s: histogram holds %d calls, count %d", sr.Name, c.Kind, inHist, c.Count)
		}
		if c.Count > 0 {
			l := c.Latency
			if !(l.Min > 0 && l.Min <= l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.Max) {
				t.Errorf("%s %s: latency quantiles out of order: %+v", sr.Name, c.Kind, l)
			}
		}
	}
	if total != sr.Requests || notOK != sr.Errors {
		t.Errorf("%s: calls add up to %d (%d not ok), reported %d (%d)", sr.Name, total, notOK, sr.Requests, sr.Errors)
	}
	var inTimeline int
	for _, s := range sr.Timeline {
		inTimeline += s.Requests
	}
	if inTimeline != sr.Requests {
		t.Errorf("%s: timeline holds %d calls, requests %d", sr.Name, inTimeline, sr.Requests)
	}
	if sr.Requests == 0 || sr.Seconds <= 0 || sr.RPS <= 0 {
		t.Errorf("%s: nothing measured: %d requests in %vs", sr.Name, sr.Requests, sr.Seconds)
	}
}

// checkReports: the JSON decodes back to the same figures and the HTML has its parts.
func checkReports(t *testing.T, res *Results) {
	t.Helper()
	dir := t.TempDir()
	jsonPath, htmlPath, err := res.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var back Results
	raw := mustRead(t, jsonPath)
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if len(back.Scenarios) != len(res.Scenarios) || back.Scenarios[0].Requests != res.Scenarios[0].Requests {
		t.Errorf("results.json does not round-trip: %s", raw[:min(len(raw), 400)])
	}
	html := string(mustRead(t, htmlPath))
	for _, want := range []string{"Latency histogram", "Calls started per second", "<iframe", "uPlot", "p99 ms"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	var sum bytes.Buffer
	if err := res.WriteSummary(&sum); err != nil {
		t.Fatal(err)
	}
	for _, sr := range res.Scenarios {
		if !strings.Contains(sum.String(), "== "+sr.Name) {
			t.Errorf("summary lacks %s:\n%s", sr.Name, sum.String())
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sessionsLeft counts the sessions the scope still holds.
func sessionsLeft(t *testing.T, s *testServer, scope string) int {
	t.Helper()
	cl := newClient(s.url, "", 1, 5*time.Second)
	defer cl.close()
	var p poolView
	if err := cl.do(context.Background(), http.MethodGet, "/v1/scopes/"+scope+"/pool", nil).decode(&p); err != nil {
		t.Fatal(err)
	}
	return p.sessions()
}

func TestWarmCycle(t *testing.T) {
	s := newTestServer(t, 20*time.Millisecond)
	res := run(t, s, Config{Scenarios: []string{ScenarioWarm}, Duration: time.Second, Sessions: 8, Workers: 4, PodConcurrency: 2})
	sr := res.Scenario(ScenarioWarm)
	w := sr.Warm
	if w.WarmPods != 4 || w.PodsBefore != 4 {
		t.Errorf("warm pods %d, pods before the run %d; want 4 (8 sessions / pod_concurrency 2)", w.WarmPods, w.PodsBefore)
	}
	if w.DeploysDuring != 0 || w.PodsAfter != 4 {
		t.Errorf("%d deploys during a warm run (pods after %d): routing was not warm", w.DeploysDuring, w.PodsAfter)
	}
	if sr.Errors != 0 {
		t.Errorf("%d calls not answered 2xx on a warm scope: %+v", sr.Errors, sr.Calls)
	}
	route, touch, end := sr.Call(KindRoute), sr.Call(KindTouch), sr.Call(KindEnd)
	if route == nil || touch == nil || end == nil {
		t.Fatalf("want route, touch and end calls, got %+v", sr.Calls)
	}
	// Each slot goes route → touch → end: at most one step apart per slot.
	if d := route.OK - end.Count; d < 0 || d > w.Sessions {
		t.Errorf("%d routes and %d ends: each of %d slots ends what it routed", route.OK, end.Count, w.Sessions)
	}
	if d := route.OK - touch.Count; d < 0 || d > w.Sessions {
		t.Errorf("%d routes and %d touches with 1 touch per cycle and %d slots", route.OK, touch.Count, w.Sessions)
	}
	if w.Cycles != end.Count {
		t.Errorf("%d cycles, %d ends", w.Cycles, end.Count)
	}
	if n := sessionsLeft(t, s, sr.Scopes[0]); n != 0 {
		t.Errorf("%d sessions left after the cleanup", n)
	}
}

func TestWarmRateAndHold(t *testing.T) {
	s := newTestServer(t, 0)
	const rate = 50
	res := run(t, s, Config{Scenarios: []string{ScenarioWarm}, Duration: time.Second, Sessions: 6, Workers: 3,
		PodConcurrency: 3, WarmMode: WarmHold, Rate: rate})
	sr := res.Scenario(ScenarioWarm)
	// Paced: never more than the rate allows (one tick may be in hand at the start).
	if sr.Requests > rate+2 {
		t.Errorf("%d calls in a 1s run at %d/s", sr.Requests, rate)
	}
	route := sr.Call(KindRoute)
	if route == nil || route.OK != 6 || sr.Call(KindEnd) != nil {
		t.Errorf("hold mode: want each of 6 sessions routed once and none ended, got %+v", sr.Calls)
	}
	if sr.Errors != 0 {
		t.Errorf("%d calls not 2xx", sr.Errors)
	}
	if n := sessionsLeft(t, s, sr.Scopes[0]); n != 0 {
		t.Errorf("%d sessions left after the cleanup", n)
	}
}

func TestColdBurst(t *testing.T) {
	const delay = 100 * time.Millisecond
	s := newTestServer(t, delay)
	res := run(t, s, Config{Scenarios: []string{ScenarioCold}, Burst: 6, MaxConcurrency: 8, PodConcurrency: 2,
		Bursts: 2, DeployDelay: delay})
	sr := res.Scenario(ScenarioCold)
	c := sr.Cold
	if c.ExpectedDeploys != 3 {
		t.Fatalf("expected deploys %d, want ceil(6/2) = 3", c.ExpectedDeploys)
	}
	if !c.AllServed || !c.DeploysAsExpected || len(c.Bursts) != 2 {
		t.Errorf("all served %v, deploys as expected %v, %d bursts: %+v", c.AllServed, c.DeploysAsExpected, len(c.Bursts), c.Bursts)
	}
	for _, b := range c.Bursts {
		if b.Served != 6 || b.PoolPods != 3 || b.DistinctPods != 3 || b.Placeholders != 0 {
			t.Errorf("burst %s: served %d, pods %d (distinct %d), placeholders %d; want 6, 3, 3, 0", b.Scope, b.Served, b.PoolPods, b.DistinctPods, b.Placeholders)
		}
		if b.WallMs < ms(delay) || b.WallOverDelay < 1 {
			t.Errorf("burst %s took %.1f ms (%.2f × delay): faster than one deploy", b.Scope, b.WallMs, b.WallOverDelay)
		}
		if n := sessionsLeft(t, s, b.Scope); n != 0 {
			t.Errorf("burst %s: %d sessions left", b.Scope, n)
		}
	}
	if n := s.fake.DeployCount(); n != 6 {
		t.Errorf("the driver saw %d deploys, want 2 bursts × 3", n)
	}
	route, end := sr.Call(KindRoute), sr.Call(KindEnd)
	if route == nil || route.Count != 12 || route.OK != 12 || end == nil || end.OK != 12 {
		t.Errorf("want 12 routes and 12 ends, all 200: %+v", sr.Calls)
	}
}

func TestQueued(t *testing.T) {
	s := newTestServer(t, 20*time.Millisecond)
	res := run(t, s, Config{Scenarios: []string{ScenarioQueued}, Duration: time.Second, MaxConcurrency: 4,
		PodConcurrency: 2, QueueSize: 64, WaitTimeout: 3 * time.Second, QueuedClients: 10, Hold: 20 * time.Millisecond})
	sr := res.Scenario(ScenarioQueued)
	q := sr.Queued
	route, end := sr.Call(KindRoute), sr.Call(KindEnd)
	if route == nil || end == nil {
		t.Fatalf("want route and end calls: %+v", sr.Calls)
	}
	if q.Served == 0 || q.Failed != 0 || q.QueueFull != 0 {
		t.Errorf("served %d, failed %d, queue full %d (queue 64 > 6 waiting clients)", q.Served, q.Failed, q.QueueFull)
	}
	if q.Served+q.QueueFull+q.WaitTimeout+q.Failed != route.Count {
		t.Errorf("route outcomes add up to %d, %d routes", q.Served+q.QueueFull+q.WaitTimeout+q.Failed, route.Count)
	}
	if end.Count != q.Served || end.OK != end.Count {
		t.Errorf("%d served routes, %d ends (%d ok): every client ends what it got", q.Served, end.Count, end.OK)
	}
	if q.MaxPodsSeen > 2 || q.MaxSessions > 4 {
		t.Errorf("pods + placeholders up to %d (max 2), sessions up to %d (max 4)", q.MaxPodsSeen, q.MaxSessions)
	}
	if q.Samples == 0 || q.MaxWaiters == 0 {
		t.Errorf("%d pool samples saw at most %d waiters: 10 clients on 4 slots must queue", q.Samples, q.MaxWaiters)
	}
	// The queue drains as sessions end: served routes are bounded by capacity / hold.
	if q.ServedPerSec > q.CapacityPerSec*1.1 {
		t.Errorf("served %.1f/s, more than capacity / hold = %.1f/s", q.ServedPerSec, q.CapacityPerSec)
	}
	if n := sessionsLeft(t, s, sr.Scopes[0]); n != 0 {
		t.Errorf("%d sessions left", n)
	}
}

func TestRefusesNonLoopback(t *testing.T) {
	for _, u := range []string{
		"http://10.0.0.1:8080", "http://192.168.1.10", "http://172.16.0.1:80", "http://8.8.8.8",
		"http://example.com:8080", "http://[2001:db8::1]:8080", "http://0.0.0.0:8080",
		"ftp://127.0.0.1", "127.0.0.1:8080", "http://:8080",
	} {
		if err := CheckLoopback(u); err == nil {
			t.Errorf("CheckLoopback(%q) accepted it", u)
		}
		res, err := Run(context.Background(), Config{Server: u, ProgressEvery: -1}, nil)
		if err == nil || res != nil {
			t.Errorf("Run against %q: err %v", u, err)
		}
	}
	if err := CheckLoopback("http://10.0.0.1:8080"); err == nil || !strings.Contains(err.Error(), "not a loopback address") {
		t.Errorf("want a clear refusal, got %v", err)
	}
	for _, u := range []string{"http://127.0.0.1:8080", "http://127.3.2.1", "http://localhost:9", "http://LOCALHOST", "https://[::1]:8443/"} {
		if err := CheckLoopback(u); err != nil {
			t.Errorf("CheckLoopback(%q): %v", u, err)
		}
	}
	// The dialer checks the resolved address too: it refuses before connecting.
	cl := newClient("http://192.0.2.1:9", "", 1, time.Second)
	defer cl.close()
	if a := cl.do(context.Background(), http.MethodGet, "/healthz", nil); a.err == nil || !strings.Contains(a.err.Error(), "not a loopback address") {
		t.Errorf("the client dialled a non-loopback address: %+v", a)
	}
}

func TestConfigBounds(t *testing.T) {
	for name, c := range map[string]Config{
		"duration":        {Duration: 11 * time.Minute},
		"scenario":        {Scenarios: []string{"soak"}},
		"sessions":        {Sessions: MaxSessions + 1},
		"workers":         {Workers: -1},
		"rate":            {Rate: -1},
		"warm-mode":       {WarmMode: "forever"},
		"burst":           {Burst: MaxBurst + 1},
		"scope-prefix":    {ScopePrefix: "Bad_Prefix"},
		"max-concurrency": {PodConcurrency: 4, MaxConcurrency: 2},
		"timeout":         {Timeout: time.Second, WaitTimeout: 5 * time.Second},
	} {
		c.Server = "http://127.0.0.1:1"
		if err := c.withDefaults().validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: want an error naming it, got %v", name, err)
		}
	}
	if err := (Config{}).withDefaults().validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
