package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// Defaults of CapacityConfig.
const (
	DefaultCapacityScopes     = 200
	DefaultCapacitySessions   = 16
	DefaultCapacityColdScopes = 100
	DefaultCapacityColdPods   = 10
	DefaultCapacityWindow     = 20 * time.Second
	DefaultCapacityWorkers    = 16
	DefaultCapacityReplicas   = 3
	DefaultCapacityReportPods = 1_000
	DefaultCapacityInterval   = 2 * time.Second
	// DefaultCapacityRate is the Cluster's fixed rate: 500 routes/s a master, the rate
	// of the routing window of make scale.
	DefaultCapacityRate = 1_500
	// capacityClaimTTL is the replicas' --claim-ttl: the cold routes' claims fall due
	// this long after them, in the window of due work that follows the cold window.
	capacityClaimTTL = 10 * time.Second
	// sweepInterval is the replicas' --sweep-interval (the default): each of the
	// DueShards due jobs and as many watch jobs runs once per interval.
	sweepInterval = 2 * time.Second
	// capacitySettle is the settle horizon of the one-shard windows: after the default
	// one the idle windows still saw 3-5 scopes swept a second, which would be charged
	// to the ticks.
	capacitySettle = 3 * time.Minute
)

// CapacityConfig is one run of the capacity model's measurements (wpbench capacity):
// on one redis-server (one shard) the Redis and replica CPU of a warm route, a PUT, a
// cold route (a deploy of the fake driver), a due scope swept, a due and a watch tick
// with nothing to do, and an agent report; then the same warm routes on a Redis
// Cluster, each master's CPU per route and its share of the scopes.
type CapacityConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh, ClusterScript
	// scripts/redis-cluster.sh; Dir holds the servers' files and capacity.json.
	Bin, RedisScript, ClusterScript, Dir string
	// Scopes of one pod and Sessions sessions each take the warm routes; ColdScopes of
	// ColdPods pods (one session a pod) are stored and routed once each, cold.
	Scopes, Sessions     int
	ColdScopes, ColdPods int
	// Window is the length of each measured window; Workers the concurrent calls.
	Window  time.Duration
	Workers int
	// ReportPods report every ReportInterval (whole seconds) in the report window.
	ReportPods     int
	ReportInterval time.Duration
	// Replicas on the Cluster, which route flat out and then at Rate routes a second
	// in all (DefaultCapacityRate when zero, none when negative), and one shard at
	// Rate / 3; NoCluster skips the Cluster run, NoShard the one-shard run.
	Replicas           int
	Rate               float64
	NoCluster, NoShard bool
	Log                io.Writer
}

func (c *CapacityConfig) fill() {
	defaults.Positive(&c.Scopes, DefaultCapacityScopes)
	defaults.Positive(&c.Sessions, DefaultCapacitySessions)
	defaults.Positive(&c.ColdScopes, DefaultCapacityColdScopes)
	defaults.Positive(&c.ColdPods, DefaultCapacityColdPods)
	defaults.Positive(&c.Window, DefaultCapacityWindow)
	defaults.Positive(&c.Workers, DefaultCapacityWorkers)
	defaults.Positive(&c.Replicas, DefaultCapacityReplicas)
	defaults.Positive(&c.ReportPods, DefaultCapacityReportPods)
	defaults.Positive(&c.ReportInterval, DefaultCapacityInterval)
	if c.Rate == 0 {
		c.Rate = DefaultCapacityRate
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// OpCost is the CPU one kind of operation cost, from one measured window: its Redis's
// and its replica's CPU per operation, the window's idle rate taken off where it says.
type OpCost struct {
	Name    string    `json:"name"`
	At      time.Time `json:"at"`
	Ops     float64   `json:"ops"`
	Seconds float64   `json:"seconds"`
	// RedisUs and ReplicaUs are CPU µs per operation.
	RedisUs   float64 `json:"redis_cpu_us"`
	ReplicaUs float64 `json:"replica_cpu_us"`
	// Net: the idle window's CPU rate is taken off.
	Net bool `json:"net_of_idle"`
	// Sweeps are the due job's looks at a scope (scope_due.lua) in the window, per
	// operation.
	Sweeps  float64 `json:"scope_sweeps_per_op"`
	LoadAvg string  `json:"load_avg"`
}

// CapacityResults is what a capacity run measured, and the model built on it.
type CapacityResults struct {
	Started time.Time `json:"started"`
	Machine string    `json:"machine"`
	// Costs are the one-shard figures, by operation.
	Costs []OpCost `json:"costs,omitempty"`
	// Phases are the one-shard windows the costs come from, commands and all.
	Phases  []*Phase      `json:"phases,omitempty"`
	Model   CapacityModel `json:"model"`
	Cluster *ClusterRun   `json:"cluster,omitempty"`
}

// The names of Costs.
const (
	opWarm    = "warm route"
	opCold    = "cold route (deploy)"
	opPut     = "config PUT"
	opDueTick = "due tick, nothing due"
	opWatch   = "watch tick"
	opReport  = "agent report"
	// clusterMasters is the masters of scripts/redis-cluster.sh.
	clusterMasters = 3
)

// warmAt names the cost of warm routes at a fixed rate.
func warmAt(rate float64) string { return fmt.Sprintf("warm route at %.0f/s", rate) }

// Capacity runs the measurements and writes capacity.json to cfg.Dir.
func Capacity(ctx context.Context, cfg CapacityConfig) (*CapacityResults, error) {
	cfg.fill()
	res := &CapacityResults{Started: time.Now().UTC(), Machine: machine()}
	if !cfg.NoShard {
		if err := cfg.shard(ctx, res); err != nil {
			return res, err
		}
		if err := cfg.reports(ctx, res); err != nil {
			return res, err
		}
		res.Model = ModelFrom(res.Costs)
	}
	if !cfg.NoCluster {
		cr, err := cfg.cluster(ctx)
		if err != nil {
			return res, fmt.Errorf("cluster run: %w", err)
		}
		res.Cluster = cr
	}
	return res, writeJSON(filepath.Join(cfg.Dir, "capacity.json"), res)
}

func (c *CapacityConfig) scale() *ScaleConfig {
	// No pause after a scrape: the replica's counters of a window (its sweeps, its
	// scripts) must cover the window alone, as its CPU does.
	return &ScaleConfig{Bin: c.Bin, RedisScript: c.RedisScript, Dir: c.Dir, Workers: c.Workers, Log: c.Log, ScrapePause: -1, SettleHorizon: capacitySettle}
}

func (c *CapacityConfig) warm() Population {
	return Population{Prefix: "w-", Scopes: c.Scopes, Pods: 1, Sessions: c.Sessions}
}

func (c *CapacityConfig) cold() Population {
	return Population{Prefix: "c-", Scopes: c.ColdScopes, Pods: c.ColdPods, Sessions: c.ColdPods}
}

// cost turns a window into the cost of ops operations, less idle's CPU rate when idle
// is not nil.
func cost(name string, ph, idle *Phase, ops float64) OpCost {
	redisCPU, replicaCPU := ph.RedisCPU, ph.ReplicaCPU
	if idle != nil {
		redisCPU -= idle.RedisCPU / idle.Seconds * ph.Seconds
		replicaCPU -= idle.ReplicaCPU / idle.Seconds * ph.Seconds
	}
	oc := OpCost{Name: name, At: time.Now().UTC(), Ops: ops, Seconds: ph.Seconds, Net: idle != nil, LoadAvg: ph.LoadAvg}
	if ops > 0 {
		oc.RedisUs, oc.ReplicaUs = 1e6*redisCPU/ops, 1e6*replicaCPU/ops
	}
	return oc
}

// shard measures the one-shard costs: on a replica with every sweep but the full pass,
// an idle window, warm routes flat out, PUTs, cold routes and the due work they leave;
// then the due ticks alone on a replica whose watch is off.
func (c *CapacityConfig) shard(ctx context.Context, res *CapacityResults) error {
	sc := c.scale()
	flags := []string{"--reconcile-interval", "1h", "--claim-ttl", capacityClaimTTL.String()}
	sc.logf("one shard: fresh redis-server and replica %s", strings.Join(flags, " "))
	e, err := sc.start(ctx, "shard", flags...)
	if err != nil {
		return err
	}
	defer e.stop()
	w := c.warm()
	if err := sc.setup(ctx, e, w, &Size{}, true); err != nil {
		return err
	}
	idle, err := e.measure(ctx, "idle", c.Window, nil)
	if err != nil {
		return err
	}
	sc.logf("  %s", idle.oneLine())
	res.Phases = append(res.Phases, idle)
	warm, err := e.measure(ctx, opWarm, 0, func(ctx context.Context) RouteStats {
		return e.cl.routeLoad(ctx, w, c.Window, 0, c.Workers)
	})
	if err != nil {
		return err
	}
	sc.logf("  %s", warm.oneLine())
	if warm.Route.Errors > 0 {
		return fmt.Errorf("warm routes: %d failed, the first: %s", warm.Route.Errors, warm.Route.FirstError)
	}
	res.Costs = append(res.Costs, cost(opWarm, warm, idle, float64(warm.Route.Routes)))
	res.Phases = append(res.Phases, warm)
	if c.Rate > 0 {
		// What one master of the Cluster run serves at its rate: the same rate here.
		rate := c.Rate / clusterMasters
		at, err := e.measure(ctx, warmAt(rate), 0, func(ctx context.Context) RouteStats {
			return e.cl.routeLoad(ctx, w, c.Window, rate, c.Workers)
		})
		if err != nil {
			return err
		}
		sc.logf("  %s", at.oneLine())
		res.Costs = append(res.Costs, cost(warmAt(rate), at, idle, float64(at.Route.Routes)))
		res.Phases = append(res.Phases, at)
	}
	cold := c.cold()
	var failed error
	put, err := e.measure(ctx, opPut, 0, func(ctx context.Context) RouteStats {
		failed = e.cl.putConfigs(ctx, cold, c.Workers)
		return RouteStats{}
	})
	if err = firstErr(err, failed); err != nil {
		return err
	}
	res.Costs = append(res.Costs, cost(opPut, put, idle, float64(cold.Scopes)))
	res.Phases = append(res.Phases, put)
	// A cold route's window lasts until the sweeps it leaves are done: its claim falls
	// due capacityClaimTTL after it, and the due job's look at the scope then is part
	// of its cost.
	routes, err := e.measure(ctx, opCold, 0, func(ctx context.Context) RouteStats {
		if failed = e.cl.routeAll(ctx, cold, c.Workers); failed == nil {
			failed = wait(ctx, capacityClaimTTL+2*sweepInterval)
		}
		if failed == nil {
			_, failed = e.settle(ctx, sc.SettleHorizon)
		}
		return RouteStats{}
	})
	if err = firstErr(err, failed); err != nil {
		return err
	}
	sc.logf("  %s", routes.oneLine())
	oc := cost(opCold, routes, idle, float64(cold.Scopes*cold.Pods))
	oc.Sweeps = routes.Scripts["scope_due"] * routes.Seconds / oc.Ops
	res.Costs = append(res.Costs, oc)
	res.Phases = append(res.Phases, routes)
	dueOnly, bare, err := c.dueTicks(ctx, sc)
	if err != nil {
		return err
	}
	res.Costs = append(res.Costs, tickCosts(idle, dueOnly, bare)...)
	res.Phases = append(res.Phases, dueOnly)
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// dueTicks measures an idle window on a replica whose watch is off, whose Redis CPU is
// the due ticks' alone, and then Redis's own CPU a second with the replica gone (its
// cron's, which the ticks are not charged for).
func (c *CapacityConfig) dueTicks(ctx context.Context, sc *ScaleConfig) (*Phase, float64, error) {
	flags := []string{"--reconcile-interval", "1h", "--watch-interval", "1h"}
	sc.logf("one shard, due ticks alone: fresh redis-server and replica %s", strings.Join(flags, " "))
	e, err := sc.start(ctx, "due-ticks", flags...)
	if err != nil {
		return nil, 0, err
	}
	defer e.stop()
	if err := sc.setup(ctx, e, c.warm(), &Size{}, true); err != nil {
		return nil, 0, err
	}
	ph, err := e.measure(ctx, "idle, no watch", c.Window, nil)
	if err != nil {
		return nil, 0, err
	}
	sc.logf("  %s", ph.oneLine())
	e.replica.stop()
	t0 := time.Now()
	a, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return nil, 0, err
	}
	if err := wait(ctx, c.Window); err != nil {
		return nil, 0, err
	}
	b, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return nil, 0, err
	}
	bare := (b.CPU - a.CPU).Seconds() / time.Since(t0).Seconds()
	sc.logf("  Redis alone: %.2f ms CPU a second", 1000*bare)
	return ph, bare, nil
}

// tickCosts splits the idle window's Redis CPU, less bare (Redis's own CPU a second),
// between due and watch ticks: a due tick costs what one did on the replica without
// the watch (dueOnly), a watch tick the rest. The replica's CPU is split the same way.
func tickCosts(idle, dueOnly *Phase, bare float64) []OpCost {
	dueRuns, watchRuns := float64(dueOnly.Sweeps["due"].Runs), float64(idle.Sweeps["watch"].Runs)
	less := func(p *Phase) *Phase {
		q := *p
		q.RedisCPU -= bare * p.Seconds
		return &q
	}
	d := cost(opDueTick, less(dueOnly), nil, dueRuns)
	w := cost(opWatch, idle, nil, watchRuns)
	if watchRuns > 0 {
		idleDue := float64(idle.Sweeps["due"].Runs)
		w.RedisUs = (1e6*less(idle).RedisCPU - idleDue*d.RedisUs) / watchRuns
		w.ReplicaUs = (1e6*idle.ReplicaCPU - idleDue*d.ReplicaUs) / watchRuns
	}
	return []OpCost{d, w}
}

// reports measures an agent report's cost with the report benchmark (wpbench reports,
// its cost windows alone), net of its idle window.
func (c *CapacityConfig) reports(ctx context.Context, res *CapacityResults) error {
	rc := ReportsConfig{Bin: c.Bin, RedisScript: c.RedisScript, Dir: filepath.Join(c.Dir, "reports"), Scopes: c.ReportPods, Pods: 1, Sessions: 1,
		Interval: c.ReportInterval, Window: c.Window, Workers: c.Workers, NoLatency: true, ScrapePause: -1, Log: c.Log}
	if err := os.MkdirAll(rc.Dir, 0o755); err != nil {
		return err
	}
	r, err := Reports(ctx, rc)
	if err != nil {
		return fmt.Errorf("reports: %w", err)
	}
	w := r.Reporting
	res.Costs = append(res.Costs, OpCost{Name: opReport, At: time.Now().UTC(), Ops: float64(w.Reports.OK), Seconds: w.Seconds,
		RedisUs: r.RedisUsNet, ReplicaUs: r.ReplicaUsNet, Net: true, LoadAvg: w.LoadAvg})
	return nil
}

// CapacityModel is the capacity model of docs/scaling.md: CPU µs per operation, of
// Redis (one shard: one core) and of a replica.
type CapacityModel struct {
	// Cold is a cold route with the sweeps it leaves.
	Warm, Cold, Put, DueTick, WatchTick, Report Cost
}

// Cost is the CPU µs of one operation: Redis's and a replica's.
type Cost struct {
	RedisUs   float64 `json:"redis_cpu_us"`
	ReplicaUs float64 `json:"replica_cpu_us"`
}

// ModelFrom picks the model's costs out of measured ones.
func ModelFrom(costs []OpCost) CapacityModel {
	var m CapacityModel
	into := map[string]*Cost{opWarm: &m.Warm, opCold: &m.Cold, opPut: &m.Put, opDueTick: &m.DueTick, opWatch: &m.WatchTick, opReport: &m.Report}
	for _, c := range costs {
		if p := into[c.Name]; p != nil {
			*p = Cost{RedisUs: c.RedisUs, ReplicaUs: c.ReplicaUs}
		}
	}
	return m
}

// Load is a deployment's work, to size it for.
type Load struct {
	// RoutesPS routes a second, ColdShare of them cold (a deploy each); each cold
	// route leaves one due scope to sweep.
	RoutesPS, ColdShare float64
	// ReportingPods report once every ReportIntervalS seconds.
	ReportingPods   int
	ReportIntervalS float64
	// PutsPS config writes a second.
	PutsPS float64
}

// perRoute is a route's cost with the load's mix of warm and cold routes.
func (m CapacityModel) perRoute(coldShare float64) Cost {
	return Cost{
		RedisUs:   (1-coldShare)*m.Warm.RedisUs + coldShare*m.Cold.RedisUs,
		ReplicaUs: (1-coldShare)*m.Warm.ReplicaUs + coldShare*m.Cold.ReplicaUs,
	}
}

// TicksCores is the Redis cores the sweep ticks keep busy with nothing to do, whatever
// the load: DueShards due and as many watch jobs, one tick each per interval, over the
// whole keyspace (on a Cluster, spread over the shards their hash tags land on).
func (m CapacityModel) TicksCores(interval time.Duration) float64 {
	perS := float64(redisstore.DueShards) / interval.Seconds()
	return perS * (m.DueTick.RedisUs + m.WatchTick.RedisUs) / 1e6
}

// RedisCores is the Redis cores l keeps busy, the ticks included.
func (m CapacityModel) RedisCores(l Load) float64 {
	c := l.RoutesPS * m.perRoute(l.ColdShare).RedisUs
	if l.ReportIntervalS > 0 {
		c += float64(l.ReportingPods) / l.ReportIntervalS * m.Report.RedisUs
	}
	c += l.PutsPS * m.Put.RedisUs
	return c/1e6 + m.TicksCores(sweepInterval)
}

// ReplicaCores is the replica cores l keeps busy (over all replicas; the ticks run on
// one replica at a time and are left out).
func (m CapacityModel) ReplicaCores(l Load) float64 {
	c := l.RoutesPS * m.perRoute(l.ColdShare).ReplicaUs
	if l.ReportIntervalS > 0 {
		c += float64(l.ReportingPods) / l.ReportIntervalS * m.Report.ReplicaUs
	}
	return (c + l.PutsPS*m.Put.ReplicaUs) / 1e6
}

// RoutesPerShard is the routes a second that fill one Redis core with coldShare of
// them cold: 1 / (Redis CPU per route).
func (m CapacityModel) RoutesPerShard(coldShare float64) float64 {
	us := m.perRoute(coldShare).RedisUs
	if us <= 0 {
		return 0
	}
	return 1e6 / us
}

// ReplicaCoresPerShard is how many replica cores the routes that fill one Redis core
// keep busy: the replica's CPU per route over Redis's.
func (m CapacityModel) ReplicaCoresPerShard(coldShare float64) float64 {
	c := m.perRoute(coldShare)
	if c.RedisUs <= 0 {
		return 0
	}
	return c.ReplicaUs / c.RedisUs
}

// ClusterRoutes is what a Cluster carries whose hottest shard takes maxShare of the
// routes (1/N when the scopes' traffic spreads evenly over N shards): that shard is
// full first.
func (m CapacityModel) ClusterRoutes(coldShare, maxShare float64) float64 {
	if maxShare <= 0 {
		return 0
	}
	return m.RoutesPerShard(coldShare) / maxShare
}

// WriteText writes the one-shard costs, the model's figures and the Cluster run.
func (r *CapacityResults) WriteText(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "Capacity: %s, %s\n\n", r.Started.Format("2006-01-02 15:04 UTC"), r.Machine)
	if len(r.Costs) > 0 {
		fmt.Fprintln(w, "| operation (one redis-server) | measured at | ops | s | Redis CPU µs per op | replica CPU µs per op | net of idle | scope sweeps per op | load avg |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, c := range r.Costs {
			fmt.Fprintf(w, "| %s | %s | %.0f | %.1f | %.1f | %.1f | %v | %.2f | %s |\n", c.Name, c.At.Format("15:04:05"), c.Ops, c.Seconds, c.RedisUs, c.ReplicaUs, c.Net, c.Sweeps, c.LoadAvg)
		}
		m := r.Model
		fmt.Fprintf(w, "\nOne shard (one Redis core) carries %.0f warm routes/s (%.1f replica cores to send them), %.0f cold routes/s (%.1f replica cores); %.0f/s at 10 %% cold\n",
			m.RoutesPerShard(0), m.ReplicaCoresPerShard(0), m.RoutesPerShard(1), m.ReplicaCoresPerShard(1), m.RoutesPerShard(0.1))
		fmt.Fprintf(w, "Sweep ticks with nothing to do: %.4f of a Redis core (whole keyspace)\n", m.TicksCores(sweepInterval))
	}
	if r.Cluster != nil {
		r.Cluster.writeText(w, r.Model, r.Costs)
	}
	_, err := io.WriteString(out, w.String())
	return err
}
