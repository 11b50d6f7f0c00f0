package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of BaselineConfig.
const (
	DefaultBaselineScopes   = 16
	DefaultBaselineSessions = 64
	DefaultBaselineDuration = 10 * time.Second
	DefaultBaselineWorkers  = 16
	DefaultBaselineRounds   = 2
	baselineWarmup          = time.Second
)

// BaselineConfig is one comparison of warmpool's warm route with the bare handler of
// scripts/routebaseline, both driven by the same affinity routes on the same Redis
// keys.
type BaselineConfig struct {
	// Bin is the warmpool binary, BaselineBin the routebaseline one; RedisScript is
	// scripts/redis.sh; Dir holds the servers' files and baseline.json.
	Bin, BaselineBin, RedisScript, Dir string
	// Scopes of one pod holding Sessions sessions each.
	Scopes, Sessions int
	// Duration of each measured run, Workers concurrent routes, Rate routes per
	// second (0 = flat out); Rounds runs of each, alternating.
	Duration time.Duration
	Workers  int
	Rate     float64
	Rounds   int
	// SettleHorizon is that of ScaleConfig; DefaultSettleHorizon when zero.
	SettleHorizon time.Duration
	Log           io.Writer
}

// BaselineResults compares CPU per route.
type BaselineResults struct {
	Started  time.Time `json:"started"`
	Machine  string    `json:"machine"`
	Scopes   int       `json:"scopes"`
	Sessions int       `json:"sessions_per_scope"`
	Warmpool []*Phase  `json:"warmpool"`
	Baseline []*Phase  `json:"baseline"`
	// CPU per route in µs (all rounds together): the replica's, the handler's, and
	// Redis's under each.
	ReplicaUs       float64 `json:"replica_cpu_per_route_us"`
	BaselineUs      float64 `json:"baseline_cpu_per_route_us"`
	Ratio           float64 `json:"ratio"`
	RedisUs         float64 `json:"redis_cpu_per_route_us"`
	RedisBaselineUs float64 `json:"redis_cpu_per_route_baseline_us"`
	// ReplicaCoresPerShard is how many replica cores one Redis core keeps busy: the
	// replica's CPU per route over Redis's.
	ReplicaCoresPerShard float64 `json:"replica_cores_per_redis_core"`
}

// Baseline runs the comparison and writes baseline.json to cfg.Dir.
func Baseline(ctx context.Context, cfg BaselineConfig) (*BaselineResults, error) {
	defaults.Positive(&cfg.Scopes, DefaultBaselineScopes)
	defaults.Positive(&cfg.Sessions, DefaultBaselineSessions)
	defaults.Positive(&cfg.Workers, DefaultBaselineWorkers)
	defaults.Positive(&cfg.Rounds, DefaultBaselineRounds)
	defaults.Positive(&cfg.Duration, DefaultBaselineDuration)
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.SettleHorizon == 0 {
		cfg.SettleHorizon = DefaultSettleHorizon
	}
	sc := &ScaleConfig{Bin: cfg.Bin, RedisScript: cfg.RedisScript, Dir: cfg.Dir, Workers: cfg.Workers, Log: cfg.Log, SettleHorizon: cfg.SettleHorizon}
	e, err := sc.start(ctx, "baseline")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	p := Population{Prefix: "base-", Scopes: cfg.Scopes, Pods: 1, Sessions: cfg.Sessions}
	if err := sc.setup(ctx, e, p, &Size{}, true); err != nil {
		return nil, err
	}
	bp, err := startProcess(ctx, cfg.BaselineBin, []string{"-redis", e.redis.Addr}, filepath.Join(cfg.Dir, "baseline", "routebaseline.log"), "/healthz")
	if err != nil {
		return nil, err
	}
	defer bp.stop()
	be := &env{redis: e.redis, replica: bp, hc: e.hc, cl: newClient(bp.URL, cfg.Workers+8), bare: true}
	res := &BaselineResults{Started: time.Now().UTC(), Machine: machine(), Scopes: cfg.Scopes, Sessions: cfg.Sessions}
	run := func(x *env, name string) (*Phase, error) {
		x.cl.routeLoad(ctx, p, baselineWarmup, cfg.Rate, cfg.Workers)
		ph, err := x.measure(ctx, name, 0, func(ctx context.Context) RouteStats {
			return x.cl.routeLoad(ctx, p, cfg.Duration, cfg.Rate, cfg.Workers)
		})
		if err == nil && ph.Route.Errors > 0 {
			err = fmt.Errorf("%s: %d routes failed, the first: %s", name, ph.Route.Errors, ph.Route.FirstError)
		}
		if err == nil {
			sc.logf("  %s", ph.oneLine())
		}
		return ph, err
	}
	for range cfg.Rounds {
		w, err := run(e, "warmpool")
		if err != nil {
			return nil, err
		}
		b, err := run(be, "baseline")
		if err != nil {
			return nil, err
		}
		res.Warmpool, res.Baseline = append(res.Warmpool, w), append(res.Baseline, b)
	}
	perRoute := func(ps []*Phase, cpu func(*Phase) float64) float64 {
		var c float64
		n := 0
		for _, p := range ps {
			c += cpu(p)
			n += p.Route.Routes
		}
		if n == 0 {
			return 0
		}
		return 1e6 * c / float64(n)
	}
	replica := func(p *Phase) float64 { return p.ReplicaCPU }
	redis := func(p *Phase) float64 { return p.RedisCPU }
	res.ReplicaUs, res.BaselineUs = perRoute(res.Warmpool, replica), perRoute(res.Baseline, replica)
	res.RedisUs, res.RedisBaselineUs = perRoute(res.Warmpool, redis), perRoute(res.Baseline, redis)
	if res.BaselineUs > 0 {
		res.Ratio = res.ReplicaUs / res.BaselineUs
	}
	if res.RedisUs > 0 {
		res.ReplicaCoresPerShard = res.ReplicaUs / res.RedisUs
	}
	return res, writeJSON(filepath.Join(cfg.Dir, "baseline.json"), res)
}

// WriteText writes the comparison's summary.
func (r *BaselineResults) WriteText(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "Warm (affinity) route, %d scopes × %d sessions, %s, %s\n\n", r.Scopes, r.Sessions, r.Started.Format("2006-01-02 15:04 UTC"), r.Machine)
	fmt.Fprintln(w, "| run | routes/s | p50 / p99 ms | server CPU µs per route | Redis CPU µs per route | load avg |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for i := range r.Warmpool {
		for _, p := range []*Phase{r.Warmpool[i], r.Baseline[i]} {
			n := float64(p.Route.Routes)
			fmt.Fprintf(w, "| %s %d | %.0f | %.2f / %.2f | %.0f | %.0f | %s |\n", p.Name, i+1, n/p.Seconds, p.Route.P50Ms, p.Route.P99Ms,
				1e6*p.ReplicaCPU/n, 1e6*p.RedisCPU/n, p.LoadAvg)
		}
	}
	fmt.Fprintf(w, "\nwarmpool %.0f µs vs baseline %.0f µs CPU per route: %.2f× (goal ≤ 1.10×, issue 25)\n", r.ReplicaUs, r.BaselineUs, r.Ratio)
	fmt.Fprintf(w, "Redis CPU per route: %.0f µs (under warmpool), %.0f µs (under the baseline); one Redis core keeps %.1f replica cores busy\n",
		r.RedisUs, r.RedisBaselineUs, r.ReplicaCoresPerShard)
	_, err := io.WriteString(out, w.String())
	return err
}
