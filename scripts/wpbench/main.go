// Command wpbench runs the measurements of docs/performance.md that need more than
// `warmpool loadtest`:
//
//	wpbench scale      the scale benchmark (make scale): S scopes × P pods × N sessions
//	                   on a fresh redis-server and replica per size; an idle phase and a
//	                   phase of steady routing; route latency with full passes against
//	                   sweeps off; the replica's RSS from 0 to 100,000 sessions
//	wpbench baseline   warmpool's CPU per warm route against the bare handler of
//	                   scripts/routebaseline on the same Redis keys
//	wpbench metrics    what /metrics costs at S scopes: its size, the CPU of a scrape,
//	                   warm routes with and without scrape loops, slow readers' RSS
//	wpbench ui         what the pool page's data (GET /v1/ui/state) costs per refresh
//	                   at S scopes: replica and Redis CPU, bytes; one page, two pages on
//	                   one replica, one page on each of two replicas
//	wpbench scopes     callers paging through GET /v1/scopes at S scopes (issue 31):
//	                   answers by status, each replica's peak RSS, and the other
//	                   replica's touch latency with the readers and without
//	wpbench reports    what agent reports cost at S pods reporting every 5 s: Redis
//	                   commands, Redis and replica CPU per report; route latency with
//	                   reports and without, sweeps on and off
//	wpbench rollout    routes by source across an image update under steady load, for
//	                   rollout drain and prewarm: one replica, the fake driver with a
//	                   deploy delay, a PUT of a new image mid-run
//	wpbench pooltrace  the warm-pool traces (make pooltrace): steady, ramp, step,
//	                   diurnal and bursty arrivals against static min_idle_pods and
//	                   warm_policy demand on one fake-driver replica; a table, the
//	                   goals met or missed, and an SVG plot (--svg)
//	wpbench capacity   the capacity model (docs/scaling.md): Redis and replica CPU per
//	                   warm route, cold route, PUT, due scope, sweep tick and report on
//	                   one redis-server, then warm routes from N replicas on a 3-master
//	                   Redis Cluster, each master's CPU per route and share of the scopes
//	wpbench script F   print the source Redis runs for lua/F (lua.Sources)
//	wpbench keys F PREFIX SCOPE [EXTRA...]
//	                   print the KEYS a replica passes to lua/F for SCOPE under the
//	                   key PREFIX, EXTRA being the extra keys its header names
//
// Flags default to the environment variables named in their help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/scripts/wpbench/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "wpbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: wpbench scale|baseline|metrics|ui|scopes|reports|rollout|pooltrace|capacity [flags] | script FILE | keys FILE PREFIX SCOPE [EXTRA...]")
	}
	switch args[0] {
	case "script":
		if len(args) != 2 {
			return fmt.Errorf("usage: wpbench script FILE (one of %s)", strings.Join(scriptNames(), ", "))
		}
		src, ok := lua.Sources[args[1]]
		if !ok {
			return fmt.Errorf("no script %q (one of %s)", args[1], strings.Join(scriptNames(), ", "))
		}
		_, err := io.WriteString(stdout, src)
		return err
	case "keys":
		if len(args) < 4 {
			return fmt.Errorf("usage: wpbench keys FILE PREFIX SCOPE [EXTRA...]")
		}
		keys, err := lua.ScriptKeys(args[1], lua.NewKeyspace(args[2]).Scope(args[3]), args[4:]...)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, strings.Join(keys, " "))
		return err
	case "scale":
		return scale(ctx, args[1:], getenv, stdout, stderr)
	case "baseline":
		return baseline(ctx, args[1:], getenv, stdout, stderr)
	case "metrics":
		return metrics(ctx, args[1:], getenv, stdout, stderr)
	case "ui":
		return poolPage(ctx, args[1:], getenv, stdout, stderr)
	case "scopes":
		return scopeList(ctx, args[1:], getenv, stdout, stderr)
	case "reports":
		return agentReports(ctx, args[1:], getenv, stdout, stderr)
	case "rollout":
		return rollout(ctx, args[1:], getenv, stdout, stderr)
	case "pooltrace":
		return poolTrace(ctx, args[1:], getenv, stdout, stderr)
	case "capacity":
		return capacity(ctx, args[1:], getenv, stdout, stderr)
	}
	return fmt.Errorf("unknown command %q: want scale, baseline, metrics, ui, scopes, reports, rollout, pooltrace, capacity, script or keys", args[0])
}

func scriptNames() []string {
	var names []string
	for n := range lua.Sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// common adds the flags both measurements take.
func common(fs *flag.FlagSet, getenv func(string) string, bin, redisSh, out *string) {
	fs.StringVar(bin, "bin", or(getenv("WARMPOOL_BIN"), "bin/warmpool"), "warmpool binary [WARMPOOL_BIN]")
	fs.StringVar(redisSh, "redis-script", "scripts/redis.sh", "scripts/redis.sh, which starts the throwaway redis-server")
	fs.StringVar(out, "out", getenv("SCALE_OUT"), "directory for the servers' files and the JSON results (default: a new temporary one) [SCALE_OUT]")
}

func or(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

func outDir(dir string) (string, error) {
	if dir != "" {
		return dir, os.MkdirAll(dir, 0o755)
	}
	return os.MkdirTemp("", "wpbench.")
}

func scale(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.ScaleConfig
	var sizes string
	env := &envs{getenv: getenv}
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := env.err(); err != nil {
		return err
	}
	var err error
	if c.Sizes, err = parseSizes(sizes); err != nil {
		return err
	}
	if c.Sessions < c.Pods {
		return fmt.Errorf("--sessions %d: at least --pods (%d): the pods are deployed by the sessions' routes", c.Sessions, c.Pods)
	}
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	_, _ = fmt.Fprintf(stderr, "wpbench scale: files in %s\n", c.Dir) // progress for a terminal
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
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.BaselineConfig
	env := &envs{getenv: getenv}
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
	fs.StringVar(&c.BaselineBin, "baseline-bin", "bin/routebaseline", "the routebaseline binary (go build -o bin/routebaseline ./scripts/routebaseline)")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultBaselineScopes, "scopes, one pod each")
	fs.IntVar(&c.Sessions, "sessions", bench.DefaultBaselineSessions, "sessions per scope")
	fs.DurationVar(&c.Duration, "duration", env.dur("DUR", bench.DefaultBaselineDuration), "length of each measured run [DUR]")
	fs.IntVar(&c.Workers, "workers", bench.DefaultBaselineWorkers, "concurrent routes")
	fs.Float64Var(&c.Rate, "rate", 0, "routes per second (0: flat out)")
	fs.IntVar(&c.Rounds, "rounds", bench.DefaultBaselineRounds, "runs of each, alternating")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := env.err(); err != nil {
		return err
	}
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	res, err := bench.Baseline(ctx, c)
	return report(stdout, res, err)
}

func metrics(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("metrics", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.MetricsConfig
	var flags string
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
	fs.StringVar(&flags, "flags", "", "serve flags added to the replica's, space-separated")
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.Flags = strings.Fields(flags)
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	_, _ = fmt.Fprintf(stderr, "wpbench metrics: files in %s\n", c.Dir) // progress for a terminal
	res, err := bench.Metrics(ctx, c)
	return report(stdout, res, err)
}

func poolPage(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ui", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.UIConfig
	var flags string
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
	fs.StringVar(&flags, "flags", "", "serve flags added to the replicas', space-separated")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultUIScopes, "scopes S")
	fs.IntVar(&c.Pods, "pods", bench.DefaultUIPods, "pods per scope P")
	fs.IntVar(&c.Sessions, "sessions", bench.DefaultUISessions, "sessions per scope N (at least P)")
	fs.IntVar(&c.Workers, "workers", bench.DefaultWorkers, "concurrent calls of the setup")
	fs.IntVar(&c.Refreshes, "refreshes", bench.DefaultRefreshes, "refreshes each page makes in each run")
	fs.DurationVar(&c.RefreshWait, "refresh-wait", bench.DefaultRefreshWait, "wait after each answer, as the page's refresh")
	fs.DurationVar(&c.Idle, "idle", bench.DefaultUIIdle, "idle window whose CPU is taken off")
	fs.StringVar(&c.Query, "query", bench.DefaultPageQuery, "the page's first request (its query string)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Sessions < c.Pods {
		return fmt.Errorf("--sessions %d: at least --pods (%d): the pods are deployed by the sessions' routes", c.Sessions, c.Pods)
	}
	c.Flags = strings.Fields(flags)
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	_, _ = fmt.Fprintf(stderr, "wpbench ui: files in %s\n", c.Dir) // progress on stderr: nothing to do if it fails
	res, err := bench.UI(ctx, c)
	return report(stdout, res, err)
}

func scopeList(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scopes", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.ScopesConfig
	var flags string
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
	fs.StringVar(&flags, "flags", "", "serve flags added to the replicas', space-separated")
	fs.IntVar(&c.Scopes, "scopes", bench.DefaultListScopes, "scopes S, one pod and one session each")
	fs.IntVar(&c.Workers, "workers", bench.DefaultWorkers, "concurrent calls of the setup")
	fs.IntVar(&c.Readers, "readers", bench.DefaultListReaders, "callers paging through GET /v1/scopes at once, on replica 1")
	fs.IntVar(&c.Limit, "limit", bench.DefaultListLimit, "scopes a page (the limit parameter)")
	fs.DurationVar(&c.ReaderGap, "reader-gap", 0, "how long each reader waits after each answer (0: flat out)")
	fs.DurationVar(&c.Window, "window", bench.DefaultListWindow, "length of each window (touches alone, then with the readers)")
	fs.Float64Var(&c.TouchRate, "touch-rate", bench.DefaultTouchRate, "touches a second on replica 2")
	fs.IntVar(&c.TouchWorkers, "touch-workers", bench.DefaultTouchWorkers, "concurrent touches")
	if err := fs.Parse(args); err != nil {
		return err
	}
	c.Flags = strings.Fields(flags)
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	_, _ = fmt.Fprintf(stderr, "wpbench scopes: files in %s\n", c.Dir) // progress on stderr: nothing to do if it fails
	res, err := bench.Scopes(ctx, c)
	return report(stdout, res, err)
}

func agentReports(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("reports", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.ReportsConfig
	var flags string
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
	fs.StringVar(&flags, "flags", "", "serve flags added to the replicas', space-separated")
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.Sessions < c.Pods {
		return fmt.Errorf("--sessions %d: at least --pods (%d): the pods are deployed by the sessions' routes", c.Sessions, c.Pods)
	}
	if c.Interval < time.Second || c.Interval%time.Second != 0 {
		return fmt.Errorf("--interval %v: want whole seconds, at least 1s (agent.report_interval_s)", c.Interval)
	}
	c.Flags = strings.Fields(flags)
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	_, _ = fmt.Fprintf(stderr, "wpbench reports: files in %s\n", c.Dir) // progress on stderr: nothing to do if it fails
	res, err := bench.Reports(ctx, c)
	return report(stdout, res, err)
}

func rollout(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.RolloutConfig
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
	fs.DurationVar(&c.Delay, "deploy-delay", bench.DefaultRolloutDelay, "how long each deploy of the fake driver takes")
	fs.Float64Var(&c.Rate, "rate", bench.DefaultRolloutRate, "new sessions a second")
	fs.DurationVar(&c.Life, "life", bench.DefaultRolloutLife, "how long each session lives")
	fs.DurationVar(&c.Warmup, "warmup", bench.DefaultRolloutWarmup, "load before the measured windows, to reach its steady state")
	fs.IntVar(&c.MinIdle, "min-idle", bench.DefaultRolloutMinIdle, "the scope's min_idle_pods")
	fs.DurationVar(&c.Before, "before", bench.DefaultRolloutBefore, "load before the image update")
	fs.DurationVar(&c.After, "after", bench.DefaultRolloutAfter, "load after the image update")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	res, err := bench.Rollout(ctx, c)
	return report(stdout, res, err)
}

func poolTrace(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pooltrace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := bench.PoolTraceConfig{Statics: bench.DefaultTraceStatics, Demands: bench.DefaultTraceDemands}
	var svg string
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
	fs.DurationVar(&c.Length, "length", bench.DefaultTraceLength, "length of every trace (they run at once)")
	fs.DurationVar(&c.Deploy, "deploy", bench.DefaultTraceDeploy, "the fake driver's deploy time D")
	fs.DurationVar(&c.Hold, "hold", bench.DefaultTraceHold, "mean session length (exponential)")
	fs.IntVar(&c.PodTTLS, "pod-ttl", bench.DefaultTracePodTTL, "pod_ttl_s of every scope")
	fs.IntVar(&c.MaxPods, "max-pods", bench.DefaultTraceMaxPods, "max_pods of every scope (one session a pod)")
	fs.Float64Var(&c.PeakRate, "peak", bench.DefaultTracePeakRate, "peak arrival rate per second")
	fs.Uint64Var(&c.Seed, "seed", 1, "seed of the arrivals")
	fs.IntVar(&c.Seeds, "seeds", bench.DefaultTraceSeeds, "arrival sequences each trace is replayed with, at once")
	fs.StringVar(&svg, "svg", "", "file to write the plot to (none when empty)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	res, err := bench.PoolTrace(ctx, c)
	if err == nil && svg != "" {
		err = writeFile(svg, res.WriteSVG)
	}
	return report(stdout, res, err)
}

func capacity(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("capacity", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c bench.CapacityConfig
	common(fs, getenv, &c.Bin, &c.RedisScript, &c.Dir)
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
	if err := fs.Parse(args); err != nil {
		return err
	}
	if c.ReportInterval < time.Second || c.ReportInterval%time.Second != 0 {
		return fmt.Errorf("--report-interval %v: want whole seconds, at least 1s (agent.report_interval_s)", c.ReportInterval)
	}
	var err error
	if c.Dir, err = outDir(c.Dir); err != nil {
		return err
	}
	c.Log = stderr
	_, _ = fmt.Fprintf(stderr, "wpbench capacity: files in %s\n", c.Dir) // progress on stderr: nothing to do if it fails
	res, err := bench.Capacity(ctx, c)
	return report(stdout, res, err)
}

// writeFile writes a file with write.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		_ = f.Close() // the write's error is the one to tell
		return err
	}
	return f.Close()
}

// envs collects the environment variables that did not parse, so that a typo stops
// the run instead of measuring the defaults.
type envs struct {
	getenv func(string) string
	bad    []string
}

func (e *envs) int(name string, d int) int {
	v := e.getenv(name)
	if v == "" {
		return d
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e.bad = append(e.bad, fmt.Sprintf("%s=%q: want an integer", name, v))
		return d
	}
	return n
}

func (e *envs) dur(name string, d time.Duration) time.Duration {
	v := e.getenv(name)
	if v == "" {
		return d
	}
	t, err := time.ParseDuration(v)
	if err != nil {
		e.bad = append(e.bad, fmt.Sprintf("%s=%q: want a duration such as 60s", name, v))
		return d
	}
	return t
}

func (e *envs) err() error {
	if len(e.bad) == 0 {
		return nil
	}
	return errors.New(strings.Join(e.bad, "; "))
}

// report writes the results of a bench run as text to stdout, or returns the run's
// error.
func report[R interface{ WriteText(io.Writer) error }](stdout io.Writer, res R, err error) error {
	if err != nil {
		return err
	}
	return res.WriteText(stdout)
}
