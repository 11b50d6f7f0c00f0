package server_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/metrics"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
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
		// SPEC §11.4: the histograms carry no scope.
		bySource := map[string]string{"source": source}
		if got := sample(t, g, "warmpool_route_duration_seconds", bySource); got != want {
			t.Errorf("warmpool_route_duration_seconds%v counts %v, want %v", bySource, got, want)
		}
	}
	if got := sample(t, g, "warmpool_route_errors_total", map[string]string{"scope": "", "code": "SCOPE_NOT_FOUND"}); got != 1 {
		t.Errorf("an unknown scope's route counts %v errors under scope \"\", want 1", got)
	}
	if got := labelValues(t, g, "warmpool_route_errors_total", "scope"); strings.Join(got, ",") != "" {
		t.Errorf("route errors are labelled with scopes %q; an unknown scope must not get a series", got)
	}

	fake := func(kv ...string) map[string]string {
		m := map[string]string{"driver": "fake"}
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
		`warmpool_refill_backoff{scope="obs"}`:                    0,
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
	job := sweeper.DueJobName(redisstore.DueShard("sw"))
	for _, j := range e.srv.Sweeper.Jobs() {
		if j.Name == job && !runJob(t, e.srv, context.Background(), j) {
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

// TestDueIndexFailuresCounted counts a due-index write that failed after a script's
// note (here the publish of a new scope, which makes it due at once) in
// warmpool_due_index_write_failures_total, exported at 0 before.
func TestDueIndexFailuresCounted(t *testing.T) {
	t.Parallel()
	var fail *testredis.Failing
	e := mustEnv(t, func(c *server.Config) {
		fail = testredis.FailCommands(1, testredis.Named("zadd", redisstore.NewKeyspace(c.Prefix).DueIndex(redisstore.DueShard("dx"))))
		c.Redis.AddHook(fail)
	})
	g := e.srv.Metrics()
	const name = "warmpool_due_index_write_failures_total"
	if n, err := testutil.GatherAndCount(g, name); err != nil || n != 1 {
		t.Fatalf("%s: %d series (%v), want 1 from the start", name, n, err)
	}
	e.putScope("dx", `{"pool":{"max_concurrency":2,"pod_concurrency":1}}`)
	if fail.Failed() != 1 {
		t.Fatalf("%d index writes failed, want the publish's", fail.Failed())
	}
	if got := sample(t, g, name, map[string]string{}); got != 1 {
		t.Fatalf("%s = %v, want 1", name, got)
	}
}

// TestNewDriver builds the pod driver with Config.NewDriver, as cmd/warmpool does from
// the driver registry: the constructor gets the replica's logger and clock, the deploy
// metrics carry Config.DriverName, the driver is closed with the replica, and an error
// of the constructor stops server.New with that error.
func TestNewDriver(t *testing.T) {
	t.Parallel()
	var gotClock warmpool.Clock
	built := fake.New()
	e := mustEnv(t, func(c *server.Config) {
		c.Driver, c.DriverName = nil, "inmemory"
		c.NewDriver = func(env driver.Env) (warmpool.PodDriver, error) {
			if env.Logger == nil {
				t.Error("the driver constructor got no logger")
			}
			gotClock = env.Clock
			return built, nil
		}
	})
	if gotClock != warmpool.Clock(e.clock) {
		t.Errorf("the driver constructor got clock %v, want the replica's", gotClock)
	}
	e.putScope("reg", scopeCfg(4, 1, 2, 10))
	e.route("reg", "s1")
	labels := map[string]string{"driver": "inmemory", "result": "ok"}
	if got := sample(t, e.srv.Metrics(), "warmpool_deploy_duration_seconds", labels); got != 1 {
		t.Errorf("deploys recorded under %v: %v, want 1", labels, got)
	}
	if err := e.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := built.Deploy(context.Background(), warmpool.DeployRequest{ScopeID: "reg", Fence: 99, Spec: warmpool.DeploySpec{ReadyTimeoutS: 1}}); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("a deploy after the replica closed: %v, want the driver closed", err)
	}

	cfg := testserver.NewBacking(t).Config("failing-driver")
	cfg.Driver, cfg.NewDriver = nil, func(driver.Env) (warmpool.PodDriver, error) { return nil, errors.New("no cluster here") }
	if _, err := server.New(context.Background(), cfg); err == nil || err.Error() != "no cluster here" {
		t.Errorf("a constructor that fails: err %v, want its error", err)
	}
	cfg.NewDriver = nil
	if _, err := server.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "NewDriver") {
		t.Errorf("no driver at all: err %v, want one naming Config.NewDriver", err)
	}
}

// withMetrics sets the replica's metrics config.
func withMetrics(mc metrics.Config) envOption {
	return func(c *server.Config) { c.Metrics = mc }
}

// get makes one GET of url on a connection of its own, with the request headers hdrs
// (name, value pairs), checks the answer against openapi.yaml, and returns it with
// its body as sent (not decompressed).
func get(tb testing.TB, url string, hdrs ...string) resp {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i+1 < len(hdrs); i += 2 {
		req.Header.Set(hdrs[i], hdrs[i+1])
	}
	tr := &http.Transport{DisableCompression: true}
	defer tr.CloseIdleConnections()
	start := time.Now()
	res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatalf("GET %s: reading the body: %v", url, err)
	}
	checkResponse(tb, req, res.StatusCode, res.Header, raw)
	return resp{method: http.MethodGet, path: req.URL.Path, status: res.StatusCode, header: res.Header, raw: raw, took: time.Since(start)}
}

// populate makes n scopes pop-<i> through the API, each with what a scope in use
// leaves in the metrics: a deployed route (a deploy and its phases), an affinity
// route, and a route refused NO_POD_AVAILABLE (max_pods 1, no queue).
func populate(t *testing.T, e *env, n int) {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second}
	call := func(method, path, body string, want int) {
		req, err := http.NewRequest(method, e.ts.URL+path, strings.NewReader(body))
		if err != nil {
			t.Error(err)
			return
		}
		res, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", method, path, err)
			return
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s %s: %d %s, want %d", method, path, res.StatusCode, raw, want)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n) && !t.Failed(); i = next.Add(1) - 1 {
				scope := fmt.Sprintf("/v1/scopes/pop-%d", i)
				call(http.MethodPut, scope+"/config", scopeCfg(1, 1, 0, 1), http.StatusOK)
				call(http.MethodPost, scope+"/sessions", `{"session_id":"s1"}`, http.StatusOK)
				call(http.MethodPost, scope+"/sessions", `{"session_id":"s1"}`, http.StatusOK)
				call(http.MethodPost, scope+"/sessions", `{"session_id":"s2"}`, http.StatusServiceUnavailable)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// TestMetricsSizePerScope checks SPEC §11.4's point: a scope in use adds a handful of
// counters and gauges to /metrics, not histograms, so a scrape of 300 scopes stays
// within 1.5 KB a scope (the target at 5,000 scopes; docs/performance.md).
func TestMetricsSizePerScope(t *testing.T) {
	t.Parallel()
	const scopes = 300
	e := mustEnv(t)
	populate(t, e, scopes)
	r := get(t, e.ts.URL+"/metrics")
	if r.status != http.StatusOK {
		t.Fatalf("metrics: %v", r)
	}
	lines := 0
	for line := range strings.Lines(string(r.raw)) {
		if !strings.HasPrefix(line, "#") {
			lines++
		}
	}
	if per := len(r.raw) / scopes; per > 1500 {
		t.Errorf("/metrics of %d scopes: %d bytes, %d a scope (%d series), want at most 1500 a scope", scopes, len(r.raw), per, lines)
	}
	// Every scope has its counters and gauges.
	for _, want := range []string{`warmpool_routes_total{scope="pop-299",source="affinity"} 1`, `warmpool_max_pods{scope="pop-0"} 1`,
		`warmpool_route_errors_total{code="NO_POD_AVAILABLE",scope="pop-7"} 1`, `warmpool_route_duration_seconds_count{source="deployed"} 300`} {
		if !strings.Contains(string(r.raw), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// liveHeap is the heap in use after a collection: what the process holds on to.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// smallBuffers is a listener whose connections have a 4 KiB send buffer: with the
// slow readers' small receive buffers, an answer of a few KB fills them and the
// replica's writes block, as answers of megabytes (thousands of scopes) do in
// buffers of any size.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(4096)
	}
	return c, err
}

// TestMetricsSlowReaders opens connections that ask for /metrics and never read, as an
// attacker would: they take at most metrics.DefaultScrapes slots, each for the scrape
// timeout, and meanwhile every other scrape is answered 503 with Retry-After at once;
// the heap holds the one rendering they share, not one gathering each (the line
// between a slow reader and a replica's memory, docs/reliability.md); once their
// timeout has passed a scrape is served again. Not parallel: it measures the heap.
func TestMetricsSlowReaders(t *testing.T) {
	const scopes, slow, timeout = 200, 40, 2 * time.Second
	e := mustEnv(t, withMetrics(metrics.Config{ScrapeTimeout: timeout}))
	populate(t, e, scopes)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Run(ctx, smallBuffers{ln}) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	base := "http://" + ln.Addr().String()
	size := len(get(t, base+"/metrics").raw)
	before := liveHeap()
	// A receive buffer of 1 KiB from the connection's start: the window it
	// offers stays that small.
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		if cerr := rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 1024) }); cerr != nil {
			return cerr
		}
		return err
	}}

	conns := make([]*net.TCPConn, 0, slow)
	t.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close() // a TCP connection buffers nothing to lose
		}
	})
	for range slow {
		c, err := dialer.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		tc := c.(*net.TCPConn)
		conns = append(conns, tc)
		if _, err := io.WriteString(tc, "GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	busy := time.Now()
	await.True(t, 5*time.Second, "a scrape beyond the slots taken by slow readers is refused", func() bool {
		return get(t, base+"/metrics").status == http.StatusServiceUnavailable
	})
	refused := get(t, base+"/metrics")
	if refused.status != http.StatusServiceUnavailable || refused.header.Get("Retry-After") != "1" || refused.took > time.Second {
		t.Fatalf("a scrape while the slots are taken: %v (Retry-After %q) in %v, want 503 with Retry-After 1 at once", refused, refused.header.Get("Retry-After"), refused.took)
	}
	if grown := int64(liveHeap()) - int64(before); grown > 8<<20 {
		t.Errorf("%d slow readers of a %d-byte /metrics hold %d more bytes of heap, want at most 8 MiB", slow, size, grown)
	}
	await.True(t, timeout+10*time.Second, "a scrape is served once the slow readers' timeout has passed", func() bool {
		return get(t, base+"/metrics").status == http.StatusOK
	})
	if took := time.Since(busy); took < timeout/2 {
		t.Errorf("the slots were free again after %v, before the slow readers' timeout %v", took, timeout)
	}
	// Each slow reader was answered: a 503 at once, or a 200 cut short at its
	// deadline (or all of it, when the kernel took it).
	answered := map[string]int{}
	for _, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		answered[strings.TrimSpace(line)]++
	}
	if n := answered["HTTP/1.1 503 Service Unavailable"]; n < slow-2*metrics.DefaultScrapes || n+answered["HTTP/1.1 200 OK"] != slow {
		t.Errorf("the slow readers were answered %v, want 503 but for the few that took the slots", answered)
	}
}

// TestMetricsListen serves /metrics alone on a listener of its own (SPEC §11.5): there
// it answers and nothing else does; the main listener has no /metrics; both close
// when the replica shuts down.
func TestMetricsListen(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, func(c *server.Config) { c.MetricsListen = "127.0.0.1:0" })
	e.putScope("ml", scopeCfg(2, 1, 0, 1))
	e.route("ml", "s1")
	r := e.run(t)
	addr := e.srv.MetricsAddr()
	if addr == "" || addr == r.addr {
		t.Fatalf("metrics address %q (main %s): want a listener of its own", addr, r.addr)
	}
	m := get(t, "http://"+addr+"/metrics", "Accept-Encoding", "gzip")
	if m.status != http.StatusOK || m.header.Get("Content-Encoding") != "gzip" || m.header.Get("X-Request-Id") == "" {
		t.Fatalf("/metrics on the metrics listener: %v %v", m, m.header)
	}
	zr, err := gzip.NewReader(bytes.NewReader(m.raw))
	if err != nil {
		t.Fatal(err)
	}
	text, err := io.ReadAll(zr)
	if err != nil || !strings.Contains(string(text), `warmpool_routes_total{scope="ml",source="deployed"} 1`) {
		t.Fatalf("gzipped metrics (%v):\n%s", err, text)
	}
	e.wantErr(e.do(http.MethodGet, "/metrics", nil), http.StatusNotFound, "NOT_FOUND")
	for _, p := range []string{"/healthz", "/readyz", "/openapi.yaml", "/ui", "/v1/scopes", "/v1/scopes/ml/pool"} {
		if res, body, err := send(http.MethodGet, "http://"+addr+p, ""); err != nil || res.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s on the metrics listener: %v %s %v, want 404", p, res, body, err)
		}
	}
	if res, body, err := send(http.MethodPost, "http://"+addr+"/metrics", ""); err != nil || res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics on the metrics listener: %v %s %v, want 405", res, body, err)
	}
	if res, _, err := send(http.MethodGet, r.base+"/healthz", ""); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("healthz on the main listener: %v %v", res, err)
	}
	r.stopped(t, addr)
}

// TestMetricsScopeDetail: --metrics-scope-detail gives the histograms a scope label,
// the scope's name for the scopes its glob matches and "" for the others, whose
// routes and deploys are counted together; the counters keep every scope's name.
func TestMetricsScopeDetail(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withMetrics(metrics.Config{ScopeDetail: "team-*"}))
	g := e.srv.Metrics()
	for _, scope := range []string{"team-a", "other", "more"} {
		e.putScope(scope, scopeCfg(2, 1, 0, 1))
		e.route(scope, "s1")
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"warmpool_route_duration_seconds", map[string]string{"scope": "team-a", "source": "deployed"}, 1},
		{"warmpool_route_duration_seconds", map[string]string{"scope": "", "source": "deployed"}, 2},
		{"warmpool_deploy_duration_seconds", map[string]string{"scope": "team-a", "driver": "fake", "result": "ok"}, 1},
		{"warmpool_deploy_duration_seconds", map[string]string{"scope": "", "driver": "fake", "result": "ok"}, 2},
		{"warmpool_deploy_phase_seconds", map[string]string{"scope": "team-a", "driver": "fake", "phase": "ready"}, 1},
		{"warmpool_deploy_phase_seconds", map[string]string{"scope": "", "driver": "fake", "phase": "ready"}, 2},
		{"warmpool_routes_total", map[string]string{"scope": "other", "source": "deployed"}, 1},
	} {
		if got := sample(t, g, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	for _, name := range []string{"warmpool_route_duration_seconds", "warmpool_deploy_duration_seconds", "warmpool_deploy_phase_seconds"} {
		if got := strings.Join(labelValues(t, g, name, "scope"), ","); got != ",team-a" {
			t.Errorf("%s has series of scopes %q, want \"\" and team-a only", name, got)
		}
	}
	// In the text every series of a histogram carries the label, "" or not: one
	// label set per family.
	text := string(get(t, e.ts.URL+"/metrics").raw)
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "warmpool_route_duration_seconds") && !strings.Contains(line, `scope="`) {
			t.Errorf("a series without the scope label: %s", line)
		}
	}

	cfg := testserver.NewBacking(t).Config("bad-glob")
	cfg.Metrics.ScopeDetail = "team-["
	if _, err := server.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "--metrics-scope-detail") {
		t.Errorf("a scope detail that is not a glob: err %v, want one naming --metrics-scope-detail", err)
	}
}

// The replica measures its clock against Redis's TIME when it starts and exports the
// skew (SPEC §12.4): on the test's Redis, a few microseconds or milliseconds.
func TestClockSkewMetric(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	skew := sample(t, e.srv.Metrics(), "warmpool_clock_skew_seconds", nil)
	if skew == 0 || math.Abs(skew) > 0.1 {
		t.Fatalf("warmpool_clock_skew_seconds = %v, want a measured skew within 100 ms", skew)
	}
}
