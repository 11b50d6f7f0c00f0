package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestParseInfo(t *testing.T) {
	st := parseInfo("# Commandstats\r\ncmdstat_evalsha:calls=12,usec=345,usec_per_call=28.75\r\ncmdstat_zrangebyscore:calls=3,usec=9\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\n# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n")
	if st.Calls["evalsha"] != 12 || st.Calls["zrangebyscore"] != 3 || len(st.Calls) != 2 {
		t.Errorf("calls = %v", st.Calls)
	}
	if st.CPU != 3750*time.Millisecond {
		t.Errorf("cpu = %v, want 3.75s", st.CPU)
	}
	if st.UsedMemory != 1<<20 {
		t.Errorf("used_memory = %d", st.UsedMemory)
	}
}

func TestSeries(t *testing.T) {
	before, err := parseSeries(strings.NewReader(`# HELP x
warmpool_sweeper_lock_held_seconds_bucket{sweep="due:0",le="0.001"} 1
warmpool_sweeper_lock_held_seconds_bucket{sweep="due:0",le="0.01"} 1
warmpool_sweeper_lock_held_seconds_bucket{sweep="due:0",le="+Inf"} 1
warmpool_sweeper_lock_held_seconds_count{sweep="due:0"} 1
warmpool_sweeper_lock_held_seconds_sum{sweep="due:0"} 0.0005
`))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseSeries(strings.NewReader(`warmpool_sweeper_lock_held_seconds_bucket{sweep="due:0",le="0.001"} 2
warmpool_sweeper_lock_held_seconds_bucket{sweep="due:0",le="0.01"} 3
warmpool_sweeper_lock_held_seconds_bucket{sweep="due:0",le="+Inf"} 3
warmpool_sweeper_lock_held_seconds_count{sweep="due:0"} 3
warmpool_sweeper_lock_held_seconds_sum{sweep="due:0"} 0.0105
warmpool_sweeper_lock_held_seconds_bucket{sweep="watch",le="0.001"} 0
warmpool_sweeper_lock_held_seconds_bucket{sweep="watch",le="0.01"} 0
warmpool_sweeper_lock_held_seconds_bucket{sweep="watch",le="+Inf"} 1
warmpool_sweeper_lock_held_seconds_count{sweep="watch"} 1
warmpool_redis_script_duration_seconds_count{script="pod_health"} 7
`))
	if err != nil {
		t.Fatal(err)
	}
	d := after.delta(before)
	if n := d.sum("warmpool_sweeper_lock_held_seconds_count", `sweep="due`); n != 2 {
		t.Errorf("due runs = %v, want 2", n)
	}
	if s := d.sum("warmpool_sweeper_lock_held_seconds_sum", `sweep="due`); math.Abs(s-0.01) > 1e-9 {
		t.Errorf("due seconds = %v, want 0.01", s)
	}
	if m := d.histMax("warmpool_sweeper_lock_held_seconds", `sweep="due`); m != 0.01 {
		t.Errorf("due max bound = %v, want 0.01", m)
	}
	if m := d.histMax("warmpool_sweeper_lock_held_seconds", `sweep="watch`); !math.IsInf(m, 1) {
		t.Errorf("watch max bound = %v, want +Inf", m)
	}
	if got := d.byLabel("warmpool_redis_script_duration_seconds_count", "script"); got["pod_health"] != 7 {
		t.Errorf("scripts = %v", got)
	}
}

func TestSteps(t *testing.T) {
	for _, c := range []struct {
		n, k int
		want []int
	}{
		{10000, 4, []int{2500, 5000, 7500, 10000}},
		{3, 10, []int{2, 3}},
		{1, 10, nil},
	} {
		if got := steps(c.n, c.k); !slices.Equal(got, c.want) {
			t.Errorf("steps(%d, %d) = %v, want %v", c.n, c.k, got, c.want)
		}
	}
}

// smokeBins returns the warmpool binary (WARMPOOL_BIN, which make test builds) and a
// freshly built routebaseline, or skips the test when it cannot run here.
func smokeBins(t *testing.T) (warmpoolBin, baselineBin string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts servers")
	}
	warmpoolBin = os.Getenv("WARMPOOL_BIN")
	if _, err := os.Stat(warmpoolBin); warmpoolBin == "" || err != nil {
		t.Skip("WARMPOOL_BIN is not a built warmpool binary (make test builds one)")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not installed")
	}
	baselineBin = filepath.Join(t.TempDir(), "routebaseline")
	// -race like make test's warmpool build: the smoke test checks that every figure is
	// measured, not what it is, and a race build reuses the packages the tests compiled.
	if out, err := exec.Command("go", "build", "-race", "-o", baselineBin, "../../routebaseline").CombinedOutput(); err != nil {
		t.Fatalf("go build routebaseline: %v\n%s", err, out)
	}
	return warmpoolBin, baselineBin
}

// TestSmoke runs the scale benchmark and the baseline comparison at a tiny size, for
// seconds (windows of a little more than one sweep tick): every figure the tables
// report must have been measured.
func TestSmoke(t *testing.T) {
	bin, baselineBin := smokeBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	res, err := Scale(ctx, ScaleConfig{Bin: bin, RedisScript: "../../redis.sh", Dir: dir, Sizes: []int{20}, Pods: 1, Sessions: 2,
		Idle: 2500 * time.Millisecond, Route: 2500 * time.Millisecond, Rate: 200, Workers: 4, PassSize: 20, RSSSessions: 200, RSSHold: 2500 * time.Millisecond,
		SettleHorizon: -1, ScrapePause: -1})
	if err != nil {
		t.Fatal(err)
	}
	sz := res.Sizes[0]
	if sz.BytesPerScope <= sz.ConfigBytesPerScope || sz.ConfigBytesPerScope <= 0 {
		t.Errorf("bytes per scope: config %v, with pods and sessions %v", sz.ConfigBytesPerScope, sz.BytesPerScope)
	}
	for _, p := range []*Phase{sz.Idle, sz.Routing, res.Pass.Off, res.Pass.NoPass, res.Pass.On, res.RSS.Hold} {
		if p.CommandsPS <= 0 || p.RSS <= 0 || p.UsedMemory <= 0 || len(p.Commands) == 0 {
			t.Errorf("%s: commands %v/s %v, RSS %d, used_memory %d", p.Name, p.CommandsPS, p.Commands, p.RSS, p.UsedMemory)
		}
	}
	if r := sz.Routing.Route; r.Routes == 0 || r.Errors > 0 || r.P99Ms <= 0 || sz.Routing.ReplicaCPU <= 0 {
		t.Errorf("routing: %+v, replica CPU %vs", r, sz.Routing.ReplicaCPU)
	}
	if sz.Routing.Scripts["session_route"] <= 0 {
		t.Errorf("routing scripts = %v, want session_route", sz.Routing.Scripts)
	}
	if sz.Idle.Sweeps["due"].Runs == 0 {
		t.Errorf("idle sweeps = %v, want due runs", sz.Idle.Sweeps)
	}
	if res.Pass.Off.Sweeps["due"].Runs != 0 || res.Pass.On.Sweeps["reconcile"].Runs == 0 {
		t.Errorf("sweeps off %v; full passes %v", res.Pass.Off.Sweeps, res.Pass.On.Sweeps)
	}
	if np := res.Pass.NoPass.Sweeps; np["due"].Runs == 0 || np["reconcile"].Runs != 0 {
		t.Errorf("sweeps without the full pass %v, want due runs and no reconcile", np)
	}
	// At 200 sessions Redis's used_memory follows its allocator's size classes and the
	// clients' buffers (it has gone down while sessions were bound) more than the
	// sessions: the figure must be the one of the steps, its sign is for a real run.
	if st := res.RSS.Steps; len(st) < 3 || st[len(st)-1].Sessions != 200 ||
		res.RSS.BytesPerSession != float64(st[len(st)-1].UsedMemory-st[1].UsedMemory)/float64(200-st[1].Sessions) {
		t.Errorf("RSS steps %v, bytes per session %v", st, res.RSS.BytesPerSession)
	}
	for _, st := range res.RSS.Steps {
		if st.Anon <= 0 || st.File <= 0 || st.Anon+st.File > st.RSS {
			t.Errorf("RSS step %+v: want anonymous and file-backed parts of it", st)
		}
	}
	var md bytes.Buffer
	if err := res.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "| 20 | idle |") {
		t.Errorf("markdown lacks the idle row:\n%s", md.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "results.json")); err != nil {
		t.Error(err)
	}

	b, err := Baseline(ctx, BaselineConfig{Bin: bin, BaselineBin: baselineBin, RedisScript: "../../redis.sh", Dir: t.TempDir(),
		Scopes: 2, Sessions: 4, Duration: time.Second, Workers: 2, Rounds: 1, SettleHorizon: -1})
	if err != nil {
		t.Fatal(err)
	}
	if b.ReplicaUs <= 0 || b.BaselineUs <= 0 || b.RedisUs <= 0 || b.Baseline[0].Route.Routes == 0 {
		t.Errorf("baseline: %+v", b)
	}
}

// A negative PassSize or RSSSessions skips that run; zero takes the default.
func TestScaleSkipsNegativeRuns(t *testing.T) {
	c := ScaleConfig{PassSize: -1, RSSSessions: -1}
	c.fill()
	if c.PassSize > 0 || c.RSSSessions > 0 {
		t.Errorf("after fill PassSize %d, RSSSessions %d: want both skipped", c.PassSize, c.RSSSessions)
	}
	c = ScaleConfig{}
	c.fill()
	if c.PassSize != DefaultPassSize || c.RSSSessions != DefaultRSSSessions {
		t.Errorf("after fill PassSize %d, RSSSessions %d: want the defaults", c.PassSize, c.RSSSessions)
	}
}

// TestMetricsSmoke runs the /metrics measurement at a tiny size for seconds: every
// figure it reports must have been measured.
func TestMetricsSmoke(t *testing.T) {
	bin, _ := smokeBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const slow = 5
	res, err := Metrics(ctx, MetricsConfig{Bin: bin, RedisScript: "../../redis.sh", Dir: t.TempDir(), Scopes: 20, Workers: 4,
		Scrapes: 2, ScrapeGap: 1100 * time.Millisecond, Route: time.Second, Rounds: 1, Slow: slow, SlowHold: time.Second, SlowRecover: time.Second,
		SettleHorizon: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes <= 0 || res.GzipBytes <= 0 || res.GzipBytes >= res.Bytes || res.Series < 20*9 || res.BytesPerScope != float64(res.Bytes)/20 {
		t.Errorf("size: %d bytes (%d gzipped), %d series, %v a scope", res.Bytes, res.GzipBytes, res.Series, res.BytesPerScope)
	}
	if res.ScrapeWallMs <= 0 || res.Routes.Routes == 0 || res.RoutesLoops.Routes == 0 || res.LoopScrapes["200"] == 0 || res.RouteRatio <= 0 {
		t.Errorf("scrapes and routes: %+v", res)
	}
	n := 0
	for _, c := range res.SlowStatus {
		n += c
	}
	if res.RSSBefore <= 0 || res.RSSSlowMax <= 0 || res.RSSAfter <= 0 || n != slow {
		t.Errorf("slow readers: RSS %d / %d / %d, answered %v", res.RSSBefore, res.RSSSlowMax, res.RSSAfter, res.SlowStatus)
	}
}

// TestUISmoke runs the pool page measurement at a tiny size for seconds: every figure
// it reports must have been measured, and the page's details asked for.
func TestUISmoke(t *testing.T) {
	bin, _ := smokeBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := UI(ctx, UIConfig{Bin: bin, RedisScript: "../../redis.sh", Dir: t.TempDir(), Scopes: 30, Pods: 1, Sessions: 1, Workers: 4,
		Refreshes: 2, RefreshWait: 200 * time.Millisecond, Idle: time.Second, SettleHorizon: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Detail != 20 || len(res.Runs) != 4 {
		t.Fatalf("detail %d, runs %d", res.Detail, len(res.Runs))
	}
	for i, r := range res.Runs {
		replicas := 1
		if i == 3 {
			replicas = 2
		}
		if len(r.Answers) != replicas || len(r.ReplicaCPUMs) != replicas || r.Bytes <= 0 || r.WallMs <= 0 || r.RedisCommands["evalsha"] <= 0 {
			t.Errorf("%s: %+v", r.Name, r)
		}
	}
	if d, f := res.Runs[1].Bytes, res.Runs[0].Bytes; d <= f || !strings.Contains(res.Runs[1].Query, "detail=u-0,") {
		t.Errorf("with details %v bytes, without %v; query %q", d, f, res.Runs[1].Query)
	}
	var txt bytes.Buffer
	if err := res.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if strings.Count(txt.String(), "\n") != 5 {
		t.Errorf("text:\n%s", txt.String())
	}
}

// TestScopesSmoke runs the GET /v1/scopes probe at a tiny size for seconds: pages of
// 7 of 30 scopes, every answer 200, walks that reach the last page, and touches
// measured in both windows.
func TestScopesSmoke(t *testing.T) {
	bin, _ := smokeBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Scopes(ctx, ScopesConfig{Bin: bin, RedisScript: "../../redis.sh", Dir: t.TempDir(), Scopes: 30, Workers: 4,
		Readers: 3, Limit: 7, ReaderGap: time.Millisecond, Window: time.Second, TouchRate: 50, TouchWorkers: 2, SettleHorizon: -1})
	if err != nil {
		t.Fatal(err)
	}
	w := res.WithReaders
	if len(res.RestRSS) != 2 || len(w.PeakRSS) != 2 || w.Pages[200] < 5 || len(w.Pages) != 1 || w.Passes < 1 || w.PageP99Ms <= 0 {
		t.Fatalf("with readers: %+v (rest RSS %v)", w, res.RestRSS)
	}
	for _, x := range []*ListWindow{res.Touches, w} {
		if x.Touch.Routes == 0 || x.Touch.Errors != 0 || x.Touch.P99Ms <= 0 {
			t.Errorf("touches: %+v", x.Touch)
		}
	}
	if res.Touches.Pages != nil {
		t.Errorf("pages read in the window of touches alone: %v", res.Touches.Pages)
	}
	var txt bytes.Buffer
	if err := res.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if strings.Count(txt.String(), "\n") != 4 {
		t.Errorf("text:\n%s", txt.String())
	}
}

// TestReportsSmoke runs the report measurement at a tiny size for seconds: every
// figure it reports must have been measured, and every report answered 200 (a token
// the replica would not make is a 401).
func TestReportsSmoke(t *testing.T) {
	bin, _ := smokeBins(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Reports(ctx, ReportsConfig{Bin: bin, RedisScript: "../../redis.sh", Dir: t.TempDir(), Scopes: 20, Pods: 1, Sessions: 2,
		Interval: time.Second, Window: 1500 * time.Millisecond, Warmup: 1200 * time.Millisecond, RouteRate: 100, Workers: 4, ReportWorkers: 4,
		SettleHorizon: -1, ScrapePause: -1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pods != 20 || res.TargetRate != 20 {
		t.Errorf("pods %d, target rate %v", res.Pods, res.TargetRate)
	}
	rp := res.Reporting
	if rp == nil || rp.Reports == nil || rp.Reports.OK == 0 || rp.Reports.Errors > 0 || rp.Route != nil {
		t.Fatalf("reporting window: %+v", rp)
	}
	if rp.Scripts["agent_report"] <= 0 {
		t.Errorf("reporting window scripts = %v, want agent_report", rp.Scripts)
	}
	if res.CommandsPerReport <= 1 || res.RedisUs <= 0 || res.ReplicaUs <= 0 {
		t.Errorf("per report: %v commands, Redis %v µs, replica %v µs", res.CommandsPerReport, res.RedisUs, res.ReplicaUs)
	}
	if len(res.Latency) != 4 {
		t.Fatalf("latency windows: %d, want 4", len(res.Latency))
	}
	for _, l := range res.Latency {
		if l.Route == nil || l.Route.Routes == 0 || l.Route.Errors > 0 || (l.Reports != nil && (l.Reports.OK == 0 || l.Reports.Errors > 0)) {
			t.Errorf("%s (sweeps %s): routes %+v, reports %+v", l.Name, l.Sweeps, l.Route, l.Reports)
		}
	}
	var txt bytes.Buffer
	if err := res.WriteText(&txt); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(txt.String(), "| reports alone | due + watch |") || !strings.Contains(txt.String(), "×") {
		t.Errorf("text:\n%s", txt.String())
	}
}
