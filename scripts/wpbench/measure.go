package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/warmpool/warmpool/scripts/wpbench/bench"
)

func scale(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.ScaleConfig
	var sizes string
	env := &envs{getenv: getenv}
	cmd := newCommand("scale", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.StringVar(&sizes, "sizes", or(getenv("SCALE_SIZES"), "1000,10000,50000,100000"), "scope counts S, comma-separated; none: only the full-pass comparison and the RSS run [SCALE_SIZES]")
	fs.IntVar(&c.Pods, "pods", env.int("SCALE_PODS", bench.DefaultPods), "pods per scope P [SCALE_PODS]")
	fs.IntVar(&c.Sessions, "sessions", env.int("SCALE_SESSIONS", bench.DefaultSessions), "sessions per scope N (at least P) [SCALE_SESSIONS]")
	fs.DurationVar(&c.Idle, "idle", env.dur("SCALE_IDLE", bench.DefaultIdle), "length of the idle phase [SCALE_IDLE]")
	fs.DurationVar(&c.Route, "route", env.dur("SCALE_ROUTE", bench.DefaultRoute), "length of the routing phase [SCALE_ROUTE]")
	fs.Float64Var(&c.Rate, "rate", float64(env.int("SCALE_RATE", bench.DefaultRate)), "affinity routes per second while routing [SCALE_RATE]")
	fs.IntVar(&c.Workers, "workers", env.int("SCALE_WORKERS", bench.DefaultWorkers), "concurrent calls of the setup and of the routing [SCALE_WORKERS]")
	fs.IntVar(&c.PassSize, "pass-size", env.int("SCALE_PASS", bench.DefaultPassSize), "S of the full-pass comparison; negative: skip it [SCALE_PASS]")
	fs.IntVar(&c.RSSSessions, "rss-sessions", env.int("SCALE_RSS", bench.DefaultRSSSessions), "sessions of the RSS run; negative: skip it [SCALE_RSS]")
	fs.DurationVar(&c.RSSHold, "rss-hold", env.dur("SCALE_RSS_HOLD", bench.DefaultRSSHold), "how long the RSS run holds its sessions [SCALE_RSS_HOLD]")
	if err := cmd.parse(args, env); err != nil {
		return err
	}
	var err error
	if c.Sizes, err = parseSizes(sizes); err != nil {
		return err
	}
	if err := atLeastPods(c.Sessions, c.Pods); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.Scale(ctx, c)
	if res != nil {
		err = errors.Join(err, res.WriteMarkdown(stdout))
	}
	return err
}

// parseSizes reads --sizes: scope counts, comma-separated, or none (an empty list).
func parseSizes(sizes string) ([]int, error) {
	out := []int{}
	if sizes == "none" {
		return out, nil
	}
	for s := range strings.SplitSeq(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--sizes %q: want positive integers, comma-separated, or none", sizes)
		}
		out = append(out, n)
	}
	return out, nil
}

func baseline(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.BaselineConfig
	env := &envs{getenv: getenv}
	cmd := newCommand("baseline", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.StringVar(&c.BaselineBin, "baseline-bin", "bin/routebaseline", "the routebaseline binary (go build -o bin/routebaseline ./scripts/routebaseline)")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultBaselineScopes, "scopes, one pod each")
	fs.IntVar(&c.Sessions, "sessions", bench.DefaultBaselineSessions, "sessions per scope")
	fs.DurationVar(&c.Duration, "duration", env.dur("DUR", bench.DefaultBaselineDuration), "length of each measured run [DUR]")
	fs.IntVar(&c.Workers, "workers", bench.DefaultBaselineWorkers, "concurrent routes")
	fs.Float64Var(&c.Rate, "rate", 0, "routes per second (0: flat out)")
	fs.IntVar(&c.Rounds, "rounds", bench.DefaultBaselineRounds, "runs of each, alternating")
	if err := cmd.parse(args, env); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, false); err != nil {
		return err
	}
	res, err := bench.Baseline(ctx, c)
	return report(stdout, res, err)
}

func metrics(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.MetricsConfig
	cmd := newCommand("metrics", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	cmd.serveFlags(&c.Flags, "replica's")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultMetricsScopes, "scopes S, one pod and one session each")
	fs.IntVar(&c.Workers, "workers", bench.DefaultWorkers, "concurrent calls of the setup and of the warm routes")
	fs.IntVar(&c.Scrapes, "scrapes", bench.DefaultMetricsScrapes, "scrapes whose CPU is measured")
	fs.DurationVar(&c.ScrapeGap, "scrape-gap", bench.DefaultScrapeGap, "time between them")
	fs.DurationVar(&c.Route, "route", bench.DefaultMetricsRoute, "length of each window of warm routes")
	fs.IntVar(&c.Loops, "loops", bench.DefaultScrapeLoops, "scrape loops of every second window")
	fs.IntVar(&c.Rounds, "rounds", bench.DefaultRouteRounds, "pairs of windows, without and with the loops in turn")
	fs.IntVar(&c.Slow, "slow", bench.DefaultSlowReaders, "connections that send GET /metrics and never read")
	fs.DurationVar(&c.SlowHold, "slow-hold", bench.DefaultSlowHold, "how long they hold")
	fs.DurationVar(&c.SlowRecover, "slow-recover", bench.DefaultSlowRecover, "how long the RSS is sampled after they close")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.Metrics(ctx, c)
	return report(stdout, res, err)
}

func poolPage(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.UIConfig
	cmd := newCommand("ui", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	cmd.serveFlags(&c.Flags, "replicas'")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultUIScopes, "scopes S")
	fs.IntVar(&c.Pods, "pods", bench.DefaultUIPods, "pods per scope P")
	fs.IntVar(&c.Sessions, "sessions", bench.DefaultUISessions, "sessions per scope N (at least P)")
	fs.IntVar(&c.Workers, "workers", bench.DefaultWorkers, "concurrent calls of the setup")
	fs.IntVar(&c.Refreshes, "refreshes", bench.DefaultRefreshes, "refreshes each page makes in each run")
	fs.DurationVar(&c.RefreshWait, "refresh-wait", bench.DefaultRefreshWait, "wait after each answer, as the page's refresh")
	fs.DurationVar(&c.Idle, "idle", bench.DefaultUIIdle, "idle window whose CPU is taken off")
	fs.StringVar(&c.Query, "query", bench.DefaultPageQuery, "the page's first request (its query string)")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := atLeastPods(c.Sessions, c.Pods); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.UI(ctx, c)
	return report(stdout, res, err)
}

func scopeList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.ScopesConfig
	cmd := newCommand("scopes", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	cmd.serveFlags(&c.Flags, "replicas'")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultListScopes, "scopes S, one pod and one session each")
	fs.IntVar(&c.Workers, "workers", bench.DefaultWorkers, "concurrent calls of the setup")
	fs.IntVar(&c.Readers, "readers", bench.DefaultListReaders, "callers paging through GET /v1/scopes at once, on replica 1")
	fs.IntVar(&c.Limit, "limit", bench.DefaultListLimit, "scopes a page (the limit parameter)")
	fs.DurationVar(&c.ReaderGap, "reader-gap", 0, "how long each reader waits after each answer (0: flat out)")
	fs.DurationVar(&c.Window, "window", bench.DefaultListWindow, "length of each window (touches alone, then with the readers)")
	fs.Float64Var(&c.TouchRate, "touch-rate", bench.DefaultTouchRate, "touches a second on replica 2")
	fs.IntVar(&c.TouchWorkers, "touch-workers", bench.DefaultTouchWorkers, "concurrent touches")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.Scopes(ctx, c)
	return report(stdout, res, err)
}

func agentReports(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.ReportsConfig
	cmd := newCommand("reports", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	cmd.serveFlags(&c.Flags, "replicas'")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultReportScopes, "scopes S")
	fs.IntVar(&c.Pods, "pods", bench.DefaultPods, "pods per scope P (S × P pods report)")
	fs.IntVar(&c.Sessions, "sessions", bench.DefaultSessions, "sessions per scope N (at least P), which the reports list")
	fs.DurationVar(&c.Interval, "interval", bench.DefaultReportInterval, "each pod's report interval, whole seconds (the scopes' agent.report_interval_s)")
	fs.DurationVar(&c.Window, "window", bench.DefaultReportWindow, "length of each measured window")
	fs.DurationVar(&c.Warmup, "warmup", 0, "how long reports run before a window with reports (default: two intervals)")
	fs.Float64Var(&c.RouteRate, "route-rate", bench.DefaultRate, "affinity routes per second of the latency windows")
	fs.IntVar(&c.Workers, "workers", bench.DefaultWorkers, "concurrent calls of the setup and the routes")
	fs.IntVar(&c.ReportWorkers, "report-workers", bench.DefaultReportWorkers, "concurrent reports")
	fs.BoolVar(&c.NoLatency, "no-latency", false, "measure the cost only: no latency windows, no second setup")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := atLeastPods(c.Sessions, c.Pods); err != nil {
		return err
	}
	if err := wholeSeconds("interval", c.Interval); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.Reports(ctx, c)
	return report(stdout, res, err)
}

func rollout(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.RolloutConfig
	cmd := newCommand("rollout", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.DurationVar(&c.Delay, "deploy-delay", bench.DefaultRolloutDelay, "how long each deploy of the fake driver takes")
	fs.Float64Var(&c.Rate, "rate", bench.DefaultRolloutRate, "new sessions a second")
	fs.DurationVar(&c.Life, "life", bench.DefaultRolloutLife, "how long each session lives")
	fs.DurationVar(&c.Warmup, "warmup", bench.DefaultRolloutWarmup, "load before the measured windows, to reach its steady state")
	fs.IntVar(&c.MinIdle, "min-idle", bench.DefaultRolloutMinIdle, "the scope's min_idle_pods")
	fs.DurationVar(&c.Before, "before", bench.DefaultRolloutBefore, "load before the image update")
	fs.DurationVar(&c.After, "after", bench.DefaultRolloutAfter, "load after the image update")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, false); err != nil {
		return err
	}
	res, err := bench.Rollout(ctx, c)
	return report(stdout, res, err)
}

func poolTrace(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := bench.PoolTraceConfig{Statics: bench.DefaultTraceStatics, Demands: bench.DefaultTraceDemands}
	var svg string
	cmd := newCommand("pooltrace", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.DurationVar(&c.Length, "length", bench.DefaultTraceLength, "length of every trace (they run at once)")
	fs.DurationVar(&c.Deploy, "deploy", bench.DefaultTraceDeploy, "the fake driver's deploy time D")
	fs.DurationVar(&c.Hold, "hold", bench.DefaultTraceHold, "mean session length (exponential)")
	fs.IntVar(&c.PodTTLS, "pod-ttl", bench.DefaultTracePodTTL, "pod_ttl_s of every scope")
	fs.IntVar(&c.MaxPods, "max-pods", bench.DefaultTraceMaxPods, "max_pods of every scope (one session a pod)")
	fs.Float64Var(&c.PeakRate, "peak", bench.DefaultTracePeakRate, "peak arrival rate per second")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the arrivals")
	fs.IntVar(&c.Seeds, "seeds", bench.DefaultTraceSeeds, "arrival sequences each trace is replayed with, at once")
	fs.StringVar(&svg, "svg", "", "file to write the plot to (none when empty)")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, false); err != nil {
		return err
	}
	res, err := bench.PoolTrace(ctx, c)
	if err == nil && svg != "" {
		err = writeFile(svg, res.WriteSVG)
	}
	return report(stdout, res, err)
}

func capacity(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var c bench.CapacityConfig
	cmd := newCommand("capacity", getenv, stderr, &c.Bin, &c.RedisScript, &c.Dir)
	fs := cmd.fs
	fs.StringVar(&c.ClusterScript, "cluster-script", "scripts/redis-cluster.sh", "scripts/redis-cluster.sh, which starts the throwaway 3-master Redis Cluster")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultCapacityScopes, "scopes of one pod that take the warm routes")
	fs.IntVar(&c.Sessions, "sessions", bench.DefaultCapacitySessions, "sessions per warm scope")
	fs.IntVar(&c.ColdScopes, "cold-scopes", bench.DefaultCapacityColdScopes, "scopes stored (one PUT each) and routed cold")
	fs.IntVar(&c.ColdPods, "cold-pods", bench.DefaultCapacityColdPods, "cold routes per cold scope, one deploy each")
	fs.DurationVar(&c.Window, "window", bench.DefaultCapacityWindow, "length of each timed window")
	fs.IntVar(&c.Workers, "workers", bench.DefaultCapacityWorkers, "concurrent calls (over all replicas)")
	fs.IntVar(&c.ReportPods, "report-pods", bench.DefaultCapacityReportPods, "pods that report in the report window")
	fs.DurationVar(&c.ReportInterval, "report-interval", bench.DefaultCapacityInterval, "their report interval, whole seconds")
	fs.IntVar(&c.Replicas, "replicas", bench.DefaultCapacityReplicas, "replicas on the Cluster")
	fs.Float64Var(&c.Rate, "rate", bench.DefaultCapacityRate, "fixed routes per second on the Cluster after the flat-out window, over all replicas, and a third of it on one shard (negative: flat out only)")
	fs.BoolVar(&c.NoShard, "no-shard", false, "skip the one-shard measurements (the Cluster's per-route CPU is then compared with nothing)")
	fs.BoolVar(&c.NoCluster, "no-cluster", false, "skip the Cluster run")
	if err := cmd.parse(args, nil); err != nil {
		return err
	}
	if err := wholeSeconds("report-interval", c.ReportInterval); err != nil {
		return err
	}
	if err := cmd.start(&c.Dir, &c.Log, true); err != nil {
		return err
	}
	res, err := bench.Capacity(ctx, c)
	return report(stdout, res, err)
}
