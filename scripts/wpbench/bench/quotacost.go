package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of QuotaCostConfig.
const (
	DefaultQuotaCostRate     = 2_500
	DefaultQuotaCostReplicas = 3
	DefaultQuotaCostScopes   = 30
	DefaultQuotaCostHold     = 200 * time.Millisecond
	DefaultQuotaCostWindow   = 20 * time.Second
)

// QuotaCostConfig is one run of wpbench quotacost (issue 35's target "the quota check
// adds ≤ 1 ms p99 to a route at 2,500 routes/s across replicas"): Replicas replicas on
// one redis-server (fake driver, one config store), Scopes scopes of warm pods spread
// over three tenants, new sessions at Rate a second in all, round robin over the
// replicas, each held Hold and then ended. Three phases, each on fresh servers: no
// quotas; each tenant with max_pods and max_sessions far above its use (every new
// session then takes allowance from its tenant's escrow: a refusal, a grant and an
// apply); the same under --max-pods-total, also far above.
type QuotaCostConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and quotacost.json.
	Bin, RedisScript, Dir string
	Rate                  float64
	// Runs is how often the three phases run, in turn (a noisy machine's figures are
	// read as the median of each phase's).
	Replicas, Scopes, Runs int
	Hold, Window           time.Duration
	Log                    io.Writer
}

func (c *QuotaCostConfig) fill() {
	defaults.Positive(&c.Rate, DefaultQuotaCostRate)
	defaults.Positive(&c.Replicas, DefaultQuotaCostReplicas)
	defaults.Positive(&c.Scopes, DefaultQuotaCostScopes)
	defaults.Positive(&c.Runs, 1)
	defaults.Positive(&c.Hold, DefaultQuotaCostHold)
	defaults.Positive(&c.Window, DefaultQuotaCostWindow)
}

// QuotaCostRow is one phase: the routes offered and answered, and over the window's
// second half the latency of the routes answered 200 and Redis's commands and CPU per
// call.
type QuotaCostRow struct {
	Run         int     `json:"run"`
	Phase       string  `json:"phase"`
	Routes      int64   `json:"routes"`
	OK          int64   `json:"ok"`
	Other       int64   `json:"other"`
	FirstErr    string  `json:"first_error,omitempty"`
	RatePerS    float64 `json:"achieved_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	P999Ms      float64 `json:"p999_ms"`
	CmdsPerCall float64 `json:"redis_commands_per_call"`
	// RedisUsPerCall is Redis's CPU per route or end (µs).
	RedisUsPerCall float64 `json:"redis_cpu_us_per_call"`
	// Sources counts the routes of the whole phase by how they were served
	// (warmpool_routes_total over the replicas): deployed and follower routes waited
	// for a deploy.
	Sources map[string]int64 `json:"sources"`
}

// QuotaCostResults is what wpbench quotacost measured.
type QuotaCostResults struct {
	Rate     float64        `json:"rate"`
	Replicas int            `json:"replicas"`
	Scopes   int            `json:"scopes"`
	HoldS    float64        `json:"hold_s"`
	WindowS  float64        `json:"window_s"`
	Rows     []QuotaCostRow `json:"rows"`
}

// QuotaCost runs wpbench quotacost.
func QuotaCost(ctx context.Context, cfg QuotaCostConfig) (*QuotaCostResults, error) {
	cfg.fill()
	res := &QuotaCostResults{Rate: cfg.Rate, Replicas: cfg.Replicas, Scopes: cfg.Scopes, HoldS: cfg.Hold.Seconds(), WindowS: cfg.Window.Seconds()}
	far := int64(1_000_000)
	for run := 1; run <= cfg.Runs; run++ {
		for i, ph := range []struct {
			name   string
			quotas bool
			flags  []string
		}{
			{"no quotas", false, nil},
			{"max_pods, max_sessions", true, nil},
			{"and --max-pods-total", true, []string{"--max-pods-total", strconv.FormatInt(far, 10)}},
		} {
			row, err := cfg.phase(ctx, fmt.Sprintf("run%d-phase%d", run, i+1), ph.name, ph.quotas, far, ph.flags)
			if err != nil {
				return res, err
			}
			row.Run = run
			res.Rows = append(res.Rows, row)
		}
	}
	return res, writeJSON(filepath.Join(cfg.Dir, "quotacost.json"), res)
}

// phase runs one phase on servers of its own.
func (c *QuotaCostConfig) phase(ctx context.Context, name, title string, quotas bool, far int64, flags []string) (QuotaCostRow, error) {
	row := QuotaCostRow{Phase: title}
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return row, err
	}
	r, err := startRedis(ctx, c.RedisScript, filepath.Join(dir, "redis"))
	if err != nil {
		return row, err
	}
	defer r.stop()
	var bases []string
	for i := range c.Replicas {
		rep := fmt.Sprintf("replica%d", i+1)
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--redis", "redis://" + r.Addr + "/0",
			"--store", filepath.Join(dir, "config.db"), "--driver", "fake", "--fake-state-dir", filepath.Join(dir, "pods"),
			"--fake-deploy-delay", "100ms", "--instance-id", rep, "--log-level", "warn", "--log-format", "text"}, flags...)
		p, err := startProcess(ctx, c.Bin, args, filepath.Join(dir, rep+".log"), "/readyz")
		if err != nil {
			return row, err
		}
		defer p.stop()
		bases = append(bases, p.URL)
	}
	setup := newClient(bases[0], 8)
	tenants := []string{"t1", "t2", "t3"}
	if quotas {
		for _, t := range tenants {
			if err := setup.setupCall(ctx, http.MethodPut, "/v1/tenants/"+t, map[string]int64{"max_pods": far, "max_sessions": far}); err != nil {
				return row, err
			}
		}
	}
	// warm pods for the sessions each scope holds at once, and as many idle
	perScope := c.Rate * c.Hold.Seconds() / float64(c.Scopes)
	pc := 8
	idle := int(perScope/float64(pc)) + 2
	for i := range c.Scopes {
		cfg := warmpool.DefaultScopeConfig()
		cfg.Tenant = tenants[i%len(tenants)]
		cfg.Pool.PodConcurrency, cfg.Pool.MaxConcurrency, cfg.Pool.MinIdlePods = pc, 4*pc*idle, idle
		if err := setup.setupCall(ctx, http.MethodPut, fmt.Sprintf("/v1/scopes/q%d/config", i), cfg); err != nil {
			return row, err
		}
	}
	sc := &ScaleConfig{Log: c.Log}
	sc.logf("%s: %d replicas, %d scopes of %d warm pods, %.0f routes/s for %v", title, c.Replicas, c.Scopes, idle, c.Rate, c.Window)
	if err := awaitWarm(ctx, setup, c.Scopes, idle); err != nil {
		return row, err
	}
	return c.load(ctx, r, bases, row)
}

// awaitWarm waits until every scope has its warm pods.
func awaitWarm(ctx context.Context, cl *client, scopes, idle int) error {
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; i < scopes; {
		var v struct {
			Pods []struct{} `json:"pods"`
		}
		if err := cl.get(ctx, fmt.Sprintf("/v1/scopes/q%d/pool", i), &v); err != nil {
			return err
		}
		if len(v.Pods) >= idle {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("scope q%d has %d of its %d warm pods after 2 minutes", i, len(v.Pods), idle)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}

// load offers the sessions (open loop) and measures the window's second half.
func (c *QuotaCostConfig) load(ctx context.Context, r *redisServer, bases []string, row QuotaCostRow) (QuotaCostRow, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 2000, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	var routes, ok, other, measured atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	half, end := start.Add(c.Window/2), start.Add(c.Window)
	var before redisStats
	var beforeErr error
	var once sync.Once
	for n := 0; ; n++ {
		at := start.Add(time.Duration(float64(n) / c.Rate * float64(time.Second)))
		if at.After(end) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Until(at))
		if !at.Before(half) {
			once.Do(func() { before, beforeErr = readRedis(ctx, r.rdb) })
		}
		base, scope, sid := bases[n%len(bases)], fmt.Sprintf("q%d", n%c.Scopes), "s"+strconv.Itoa(n)
		wg.Go(func() {
			t0 := time.Now()
			code, err := routeStatus(ctx, hc, base, scope, sid)
			d := time.Since(t0)
			routes.Add(1)
			if code != http.StatusOK {
				if other.Add(1) == 1 {
					mu.Lock()
					row.FirstErr = fmt.Sprintf("status %d %v", code, err)
					mu.Unlock()
				}
				return
			}
			ok.Add(1)
			if !t0.Before(half) {
				measured.Add(1)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
			time.Sleep(c.Hold)
			(&TenantsConfig{}).end(ctx, hc, base, scope, sid)
		})
	}
	after, err := readRedis(ctx, r.rdb)
	took := time.Since(half)
	wg.Wait()
	row.Sources = map[string]int64{}
	for _, base := range bases {
		if err := routeSources(ctx, base, row.Sources); err != nil {
			return row, err
		}
	}
	if beforeErr != nil || err != nil {
		return row, fmt.Errorf("redis INFO: %v %v", beforeErr, err)
	}
	row.Routes, row.OK, row.Other = routes.Load(), ok.Load(), other.Load()
	row.RatePerS = float64(measured.Load()) / took.Seconds()
	row.P50Ms, row.P99Ms, row.P999Ms = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 0.999)
	if m := measured.Load(); m > 0 {
		// each route is followed by its end: the figures are per route or end
		var cmds int64
		for name, n := range after.Calls {
			cmds += n - before.Calls[name]
		}
		row.CmdsPerCall = float64(cmds) / float64(2*m)
		row.RedisUsPerCall = float64((after.CPU - before.CPU).Microseconds()) / float64(2*m)
	}
	return row, nil
}

// routeSources adds the replica's warmpool_routes_total by source to into.
func routeSources(ctx context.Context, base string, into map[string]int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := scrapeClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "warmpool_routes_total{") {
			continue
		}
		_, rest, _ := strings.Cut(line, `source="`)
		source, _, _ := strings.Cut(rest, `"`)
		f := strings.Fields(line)
		n, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			into[source] += int64(n)
		}
	}
	return nil
}

// WriteText writes the rows as a table.
func (r *QuotaCostResults) WriteText(w io.Writer) error {
	rows := [][]string{{"run", "phase", "routes", "ok", "other", "routes/s", "p50 ms", "p99 ms", "p99.9 ms", "Redis cmds/call", "Redis µs/call", "waited for a deploy"}}
	for _, x := range r.Rows {
		rows = append(rows, []string{fmt.Sprint(x.Run), x.Phase, fmt.Sprint(x.Routes), fmt.Sprint(x.OK), fmt.Sprint(x.Other), fmt.Sprintf("%.0f", x.RatePerS),
			fmt.Sprintf("%.2f", x.P50Ms), fmt.Sprintf("%.2f", x.P99Ms), fmt.Sprintf("%.2f", x.P999Ms), fmt.Sprintf("%.1f", x.CmdsPerCall), fmt.Sprintf("%.0f", x.RedisUsPerCall), fmt.Sprint(x.Sources["deployed"] + x.Sources["follower"])})
	}
	head := fmt.Sprintf("%d replicas, %d scopes over 3 tenants, %.0f new sessions/s offered, held %.1f s, windows of %.0f s\n",
		r.Replicas, r.Scopes, r.Rate, r.HoldS, r.WindowS)
	_, err := io.WriteString(w, head+table(rows))
	return err
}
