package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of TenantsConfig.
const (
	DefaultTenantsCap    = 60
	DefaultQuietRate     = 5
	DefaultLoudFactor    = 10
	DefaultTenantsHold   = 2 * time.Second
	DefaultTenantsDeploy = 500 * time.Millisecond
	DefaultTenantsWindow = 30 * time.Second
)

// TenantsConfig is one run of wpbench tenants (issue 35): three tenants, quiet1 and
// quiet2 of weights 1 and 2 offering QuietRate new sessions a second each and loud of
// weight 1 offering LoudFactor times that, each session held Hold and then ended, on a
// fake-driver replica under --max-pods-total Cap (deploys of Deploy). The quiet
// tenants run alone first, then all three together, each for Window.
type TenantsConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and tenants.json.
	Bin, RedisScript, Dir string
	Cap                   int
	QuietRate             float64
	LoudFactor            int
	Hold, Deploy, Window  time.Duration
	Log                   io.Writer
}

func (c *TenantsConfig) fill() {
	defaults.Positive(&c.Cap, DefaultTenantsCap)
	defaults.Positive(&c.QuietRate, DefaultQuietRate)
	defaults.Positive(&c.LoudFactor, DefaultLoudFactor)
	defaults.Positive(&c.Hold, DefaultTenantsHold)
	defaults.Positive(&c.Deploy, DefaultTenantsDeploy)
	defaults.Positive(&c.Window, DefaultTenantsWindow)
}

// benchTenant is one tenant of the run: its scope has its name.
type benchTenant struct {
	name   string
	weight int
	rate   float64
}

// TenantRow is one tenant in one phase: its routes by outcome; over the phase's second
// half (the pools filled), the latency of the routes answered 200 and the share of
// them answered warm (faster than half a deploy), and the pods it held, sampled every
// 250 ms.
type TenantRow struct {
	Phase     string  `json:"phase"`
	Tenant    string  `json:"tenant"`
	Weight    int     `json:"weight"`
	Rate      float64 `json:"rate"`
	Routes    int     `json:"routes"`
	OK        int     `json:"ok"`
	Refused   int     `json:"refused_429"`
	Other     int     `json:"other"`
	FirstErr  string  `json:"first_error,omitempty"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	WarmShare float64 `json:"warm_share"`
	PodsMean  float64 `json:"pods_mean"`
	PodsMin   int64   `json:"pods_min"`
	PodsMax   int64   `json:"pods_max"`
}

// TenantsResults is what wpbench tenants measured.
type TenantsResults struct {
	Cap  int         `json:"max_pods_total"`
	Rows []TenantRow `json:"rows"`
	Hold float64     `json:"hold_s"`
	Dep  float64     `json:"deploy_s"`
	WinS float64     `json:"window_s"`
}

// Tenants runs wpbench tenants: each phase on a fresh replica and redis-server, every
// tenant starting at once.
func Tenants(ctx context.Context, cfg TenantsConfig) (*TenantsResults, error) {
	cfg.fill()
	quiet := []benchTenant{{"quiet1", 1, cfg.QuietRate}, {"quiet2", 2, cfg.QuietRate}}
	loud := benchTenant{"loud", 1, cfg.QuietRate * float64(cfg.LoudFactor)}
	res := &TenantsResults{Cap: cfg.Cap, Hold: cfg.Hold.Seconds(), Dep: cfg.Deploy.Seconds(), WinS: cfg.Window.Seconds()}
	for i, ph := range []struct {
		name    string
		tenants []benchTenant
	}{{"alone", quiet}, {"with loud", append(quiet, loud)}} {
		rows, err := cfg.run(ctx, fmt.Sprintf("phase%d", i+1), ph.name, ph.tenants)
		if err != nil {
			return res, err
		}
		res.Rows = append(res.Rows, rows...)
	}
	return res, writeJSON(filepath.Join(cfg.Dir, "tenants.json"), res)
}

// run is one phase on a replica of its own.
func (c *TenantsConfig) run(ctx context.Context, dir, phase string, ts []benchTenant) ([]TenantRow, error) {
	sc := &ScaleConfig{Bin: c.Bin, RedisScript: c.RedisScript, Dir: c.Dir, Workers: 4, Log: c.Log, ScrapePause: -1}
	e, err := sc.start(ctx, dir, "--fake-deploy-delay", c.Deploy.String(), "--max-pods-total", strconv.Itoa(c.Cap),
		"--sweep-interval", "1s", "--reconcile-interval", "1h")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	for _, t := range ts {
		if err := e.cl.setupCall(ctx, http.MethodPut, "/v1/tenants/"+t.name, map[string]int{"weight": t.weight}); err != nil {
			return nil, err
		}
		cfg := warmpool.DefaultScopeConfig()
		cfg.Tenant = t.name
		cfg.Pool.PodConcurrency, cfg.Pool.MaxConcurrency, cfg.Pool.MinIdlePods = 1, 10*c.Cap, 0
		cfg.Pool.QueueSize, cfg.Pool.WaitTimeoutS = 0, 0
		if err := e.cl.setupCall(ctx, http.MethodPut, "/v1/scopes/"+t.name+"/config", cfg); err != nil {
			return nil, err
		}
	}
	sc.logf("%s: %d tenants for %v", phase, len(ts), c.Window)
	rows, err := c.phase(ctx, e, phase, ts)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		sc.logf("  %s: %d routes, %d ok, %d refused, p99 %.0f ms, warm %.2f, pods %.1f (%d-%d) %s", r.Tenant, r.Routes, r.OK, r.Refused, r.P99Ms, r.WarmShare, r.PodsMean, r.PodsMin, r.PodsMax, r.FirstErr)
	}
	return rows, nil
}

// phase offers each tenant its rate of sessions for the window (open loop), and
// samples the pods each holds.
func (c *TenantsConfig) phase(ctx context.Context, e *env, phase string, ts []benchTenant) ([]TenantRow, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: 1000, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	rows := make([]TenantRow, len(ts))
	lat := make([][]time.Duration, len(ts))
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(c.Window)
	for i, t := range ts {
		rows[i] = TenantRow{Phase: phase, Tenant: t.name, Weight: t.weight, Rate: t.rate, PodsMin: -1}
		wg.Go(func() {
			for n := 0; ; n++ {
				at := start.Add(time.Duration(float64(n) / t.rate * float64(time.Second)))
				if at.After(end) || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(at))
				wg.Go(func() {
					sid := fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(phase, " ", "-"), t.name, n)
					t0 := time.Now()
					code, err := routeStatus(ctx, hc, e.replica.URL, t.name, sid)
					d := time.Since(t0)
					mu.Lock()
					rows[i].Routes++
					switch code {
					case http.StatusOK:
						rows[i].OK++
						if t0.Sub(start) >= c.Window/2 {
							lat[i] = append(lat[i], d)
						}
					case http.StatusTooManyRequests:
						rows[i].Refused++
					default:
						rows[i].Other++
						if rows[i].FirstErr == "" {
							rows[i].FirstErr = fmt.Sprintf("status %d %v", code, err)
						}
					}
					mu.Unlock()
					if code == http.StatusOK {
						time.Sleep(c.Hold)
						c.end(ctx, hc, e.replica.URL, t.name, sid)
					}
				})
			}
		})
	}
	samples := make([][]int64, len(ts))
	for now := time.Now(); now.Before(end); now = time.Now() {
		time.Sleep(250 * time.Millisecond)
		if time.Since(start) < c.Window/2 {
			continue
		}
		for i, t := range ts {
			var v struct {
				Use struct {
					Pods int64 `json:"pods"`
				} `json:"use"`
			}
			if err := e.cl.get(ctx, "/v1/tenants/"+t.name, &v); err != nil {
				return nil, err
			}
			samples[i] = append(samples[i], v.Use.Pods)
		}
	}
	wg.Wait()
	for i := range rows {
		r := &rows[i]
		r.P50Ms, r.P99Ms = quantileMs(lat[i], 0.50), quantileMs(lat[i], 0.99)
		warm := 0
		for _, d := range lat[i] {
			if d < c.Deploy/2 {
				warm++
			}
		}
		if len(lat[i]) > 0 {
			r.WarmShare = float64(warm) / float64(len(lat[i]))
		}
		var sum int64
		for _, p := range samples[i] {
			sum += p
			r.PodsMax = max(r.PodsMax, p)
			if r.PodsMin < 0 || p < r.PodsMin {
				r.PodsMin = p
			}
		}
		if n := len(samples[i]); n > 0 {
			r.PodsMean = float64(sum) / float64(n)
		}
	}
	return rows, nil
}

// end ends the session (its answer is not measured).
func (c *TenantsConfig) end(ctx context.Context, hc *http.Client, base, scope, sid string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, base+"/v1/scopes/"+scope+"/sessions/"+sid, nil)
	if err != nil {
		return
	}
	if resp, err := hc.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// WriteText writes the rows as a table.
func (r *TenantsResults) WriteText(w io.Writer) error {
	rows := [][]string{{"phase", "tenant", "weight", "rate/s", "routes", "ok", "429", "other", "p50 ms", "p99 ms", "warm", "pods", "min-max"}}
	for _, x := range r.Rows {
		rows = append(rows, []string{x.Phase, x.Tenant, fmt.Sprint(x.Weight), fmt.Sprintf("%.0f", x.Rate), fmt.Sprint(x.Routes),
			fmt.Sprint(x.OK), fmt.Sprint(x.Refused), fmt.Sprint(x.Other), fmt.Sprintf("%.1f", x.P50Ms), fmt.Sprintf("%.1f", x.P99Ms),
			fmt.Sprintf("%.2f", x.WarmShare), fmt.Sprintf("%.1f", x.PodsMean), fmt.Sprintf("%d-%d", x.PodsMin, x.PodsMax)})
	}
	head := fmt.Sprintf("max_pods_total %d, sessions of %.1f s, deploys of %.1f s, windows of %.0f s\n", r.Cap, r.Hold, r.Dep, r.WinS)
	_, err := io.WriteString(w, head+table(rows))
	return err
}
