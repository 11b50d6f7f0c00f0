package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/internal/httpx"
)

// Defaults of ReportsConfig.
const (
	DefaultReportScopes   = 10_000
	DefaultReportInterval = 5 * time.Second
	DefaultReportWindow   = 60 * time.Second
	DefaultReportWorkers  = 64
	// reportSecret is the replicas' --report-secret, under which the benchmark makes
	// each pod's token as the replica does.
	reportSecret = "wpbench-report-secret"
)

// ReportsConfig is one measurement of what agent reports cost (wpbench reports): S
// scopes of P pods and N sessions on a fresh redis-server and replica (fake driver),
// every pod reporting its sessions once per Interval, signed with its own token. Two
// setups: one replica with the due and watch jobs (no full pass), which measures an
// idle window without reports, a window of reports alone (their cost), then route
// latency with reports and, once the reports have stopped for longer than they spare
// a pod, with probes; and one with sweeps off, which measures route latency with
// reports and without.
type ReportsConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and reports.json.
	Bin, RedisScript, Dir string
	// Flags are added to `warmpool serve`'s.
	Flags []string
	// Scopes, Pods and Sessions are S, P and N (the pods are S × P).
	Scopes, Pods, Sessions int
	// Interval is each pod's report interval (whole seconds, the scopes'
	// agent.report_interval_s): S × P / Interval reports a second.
	Interval time.Duration
	// Window is the length of each measured window; Warmup how long reports run
	// before a window with reports opens (DefaultReportInterval × 2 when zero), so
	// that every pod has reported and the watch spares it.
	Window, Warmup time.Duration
	// RouteRate is the affinity routes a second of the latency windows
	// (DefaultRate when zero); Workers the concurrency of the setup and the routes,
	// ReportWorkers that of the reports.
	RouteRate              float64
	Workers, ReportWorkers int
	// NoLatency skips the latency windows and the second setup.
	NoLatency bool
	// SettleHorizon and ScrapePause are those of ScaleConfig; their defaults when zero.
	SettleHorizon, ScrapePause time.Duration
	Log                        io.Writer
}

func (c *ReportsConfig) fill() {
	defaults.Positive(&c.Scopes, DefaultReportScopes)
	defaults.Positive(&c.Pods, DefaultPods)
	defaults.Positive(&c.Sessions, DefaultSessions)
	defaults.Positive(&c.Interval, DefaultReportInterval)
	c.Interval = max(c.Interval.Truncate(time.Second), time.Second) // whole seconds, as the config has it
	defaults.Positive(&c.Window, DefaultReportWindow)
	defaults.Positive(&c.Warmup, 2*c.Interval)
	defaults.Positive(&c.Workers, DefaultWorkers)
	defaults.Positive(&c.ReportWorkers, DefaultReportWorkers)
	if c.RouteRate == 0 {
		c.RouteRate = DefaultRate
	}
	if c.SettleHorizon == 0 {
		c.SettleHorizon = DefaultSettleHorizon
	}
	if c.ScrapePause == 0 {
		c.ScrapePause = DefaultScrapePause
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// ReportsResults is what a report measurement found.
type ReportsResults struct {
	Started  time.Time `json:"started"`
	Machine  string    `json:"machine"`
	Scopes   int       `json:"scopes"`
	Pods     int       `json:"pods"`
	Sessions int       `json:"sessions_per_scope"`
	Flags    []string  `json:"flags,omitempty"`
	// IntervalS is each pod's report interval; TargetRate the reports a second.
	IntervalS  float64 `json:"interval_s"`
	TargetRate float64 `json:"target_reports_per_s"`
	// Idle is a window without reports (the pods probed), Reporting one of reports
	// alone, both on the replica with the due and watch jobs.
	Idle      *Phase       `json:"idle"`
	Reporting *ReportPhase `json:"reporting"`
	// Per report: gross (all the Reporting window's work over its reports) and net
	// (less the Idle window's rate, which had the probes that reports replace).
	CommandsPerReport    float64 `json:"redis_commands_per_report"`
	CommandsPerReportNet float64 `json:"redis_commands_per_report_net"`
	RedisUs              float64 `json:"redis_cpu_us_per_report"`
	RedisUsNet           float64 `json:"redis_cpu_us_per_report_net"`
	ReplicaUs            float64 `json:"replica_cpu_us_per_report"`
	ReplicaUsNet         float64 `json:"replica_cpu_us_per_report_net"`
	// Latency are the windows of routes, with reports and without.
	Latency []*ReportPhase `json:"latency,omitempty"`
}

// ReportPhase is a measured window and the reports sent in it.
type ReportPhase struct {
	*Phase
	Sweeps  string       `json:"sweeps"`
	Reports *ReportStats `json:"reports,omitempty"`
	// ClientCPU is the CPU seconds the benchmark itself (the reports' and routes'
	// client, on the same machine) used in the window.
	ClientCPU float64 `json:"client_cpu_s"`
}

// Reports runs the report measurement and writes reports.json to cfg.Dir.
func Reports(ctx context.Context, cfg ReportsConfig) (*ReportsResults, error) {
	cfg.fill()
	res := &ReportsResults{Started: time.Now().UTC(), Machine: machine(), Scopes: cfg.Scopes, Pods: cfg.Scopes * cfg.Pods,
		Sessions: cfg.Sessions, Flags: cfg.Flags, IntervalS: cfg.Interval.Seconds()}
	res.TargetRate = float64(res.Pods) / res.IntervalS
	if err := cfg.costRun(ctx, res); err != nil {
		return res, err
	}
	if !cfg.NoLatency {
		if err := cfg.sweepsOffRun(ctx, res); err != nil {
			return res, err
		}
	}
	return res, writeJSON(filepath.Join(cfg.Dir, "reports.json"), res)
}

func (c *ReportsConfig) scale() *ScaleConfig {
	return &ScaleConfig{Bin: c.Bin, RedisScript: c.RedisScript, Dir: c.Dir, Workers: c.Workers, Route: c.Window,
		SettleHorizon: c.SettleHorizon, ScrapePause: c.ScrapePause, Log: c.Log}
}

func (c *ReportsConfig) population() Population {
	return Population{Prefix: "r-", Scopes: c.Scopes, Pods: c.Pods, Sessions: c.Sessions, ReportIntervalS: int(c.Interval / time.Second)}
}

// start starts a fresh Redis and replica with flags, stores the population, binds its
// sessions and (sweeps) waits for the due work of the setup; it returns the reporter of
// the population's pods.
func (c *ReportsConfig) start(ctx context.Context, name string, sweeps bool, flags ...string) (*env, *reporter, error) {
	sc := c.scale()
	sc.logf("S=%d scopes of %d pods and %d sessions, %s: fresh redis-server and replica", c.Scopes, c.Pods, c.Sessions, name)
	flags = append(append([]string{"--report-secret", reportSecret}, flags...), c.Flags...)
	e, err := sc.start(ctx, name, flags...)
	if err != nil {
		return nil, nil, err
	}
	p := c.population()
	if err := sc.setup(ctx, e, p, &Size{}, sweeps); err != nil {
		e.stop()
		return nil, nil, err
	}
	pods, err := readPods(ctx, e.redis.rdb, p, httpx.NewReportKey(httpx.FixedToken(reportSecret)))
	if err != nil {
		e.stop()
		return nil, nil, err
	}
	rand.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	sc.logf("  %d pods found", len(pods))
	return e, newReporter(e.replica.URL, pods, c.Interval, c.ReportWorkers), nil
}

// costRun measures, on a replica with the due and watch jobs: an idle window, a window
// of reports alone, and the latency windows with reports and with probes.
func (c *ReportsConfig) costRun(ctx context.Context, res *ReportsResults) error {
	const sweeps = "due + watch"
	e, rep, err := c.start(ctx, "sweeps-on", true, "--reconcile-interval", "1h")
	if err != nil {
		return err
	}
	defer e.stop()
	sc := c.scale()
	sc.logf("  idle for %v (no reports: the watch probes every pod)", c.Window)
	if res.Idle, err = e.measure(ctx, "idle, no reports", c.Window, nil); err != nil {
		return err
	}
	sc.logf("  %s", res.Idle.oneLine())
	stop := rep.start(ctx)
	defer stop()
	sc.logf("  reports at %.0f/s: %v to warm up, then %v", res.TargetRate, c.Warmup, c.Window)
	if err := wait(ctx, c.Warmup); err != nil {
		return err
	}
	if res.Reporting, err = c.window(ctx, e, rep, "reports alone", sweeps, false); err != nil {
		return err
	}
	res.perReport()
	sc.logf("  per report: %.1f commands (%.1f net), Redis %.0f µs (%.0f net), replica %.0f µs (%.0f net)",
		res.CommandsPerReport, res.CommandsPerReportNet, res.RedisUs, res.RedisUsNet, res.ReplicaUs, res.ReplicaUsNet)
	if c.NoLatency {
		return nil
	}
	l, err := c.window(ctx, e, rep, "routes, reports", sweeps, true)
	if err != nil {
		return err
	}
	res.Latency = append(res.Latency, l)
	stop()
	// A report spares its pod for three intervals: past them, the watch probes again.
	sc.logf("  reports stopped; routes with probes after %v", 3*c.Interval+c.Interval)
	if err := wait(ctx, 4*c.Interval); err != nil {
		return err
	}
	if l, err = c.window(ctx, e, nil, "routes, no reports (probes)", sweeps, true); err != nil {
		return err
	}
	res.Latency = append(res.Latency, l)
	return nil
}

// sweepsOffRun measures route latency with reports and without on a replica whose
// sweeps are off.
func (c *ReportsConfig) sweepsOffRun(ctx context.Context, res *ReportsResults) error {
	const sweeps = "off"
	e, rep, err := c.start(ctx, "sweeps-off", false, "--sweep-interval", "1h")
	if err != nil {
		return err
	}
	defer e.stop()
	l, err := c.window(ctx, e, nil, "routes, no reports", sweeps, true)
	if err != nil {
		return err
	}
	res.Latency = append(res.Latency, l)
	stop := rep.start(ctx)
	defer stop()
	if err := wait(ctx, c.Warmup); err != nil {
		return err
	}
	if l, err = c.window(ctx, e, rep, "routes, reports", sweeps, true); err != nil {
		return err
	}
	res.Latency = append(res.Latency, l)
	return nil
}

// window measures one window: routes at RouteRate (routes) or none, and the reports rep
// sends meanwhile (nil: none).
func (c *ReportsConfig) window(ctx context.Context, e *env, rep *reporter, name, sweeps string, routes bool) (*ReportPhase, error) {
	rp := &ReportPhase{Sweeps: sweeps}
	p := c.population()
	ph, err := e.measure(ctx, name, 0, func(ctx context.Context) RouteStats {
		if rep != nil {
			rep.take()
		}
		cpu0, _ := procCPU(os.Getpid())
		defer func() {
			cpu1, _ := procCPU(os.Getpid())
			rp.ClientCPU = (cpu1 - cpu0).Seconds()
		}()
		var st RouteStats
		if routes {
			st = e.cl.routeLoad(ctx, p, c.Window, c.RouteRate, c.Workers)
		} else {
			_ = wait(ctx, c.Window)
		}
		if rep != nil {
			rs := rep.take()
			rp.Reports = &rs
		}
		return st
	})
	if err != nil {
		return nil, err
	}
	if !routes {
		ph.Route = nil
	}
	rp.Phase = ph
	line := ph.oneLine() + fmt.Sprintf("; client CPU %.2fs", rp.ClientCPU)
	if r := rp.Reports; r != nil {
		line += "; " + r.oneLine()
	}
	c.scale().logf("  %s (sweeps %s)", line, sweeps)
	return rp, nil
}

// perReport divides the Reporting window's work by its reports, gross and less the
// Idle window's rate.
func (r *ReportsResults) perReport() {
	w, idle := r.Reporting, r.Idle
	if w == nil || w.Reports == nil || w.Reports.OK == 0 || idle == nil {
		return
	}
	n := float64(w.Reports.OK)
	r.CommandsPerReport = w.CommandsPS * w.Seconds / n
	r.CommandsPerReportNet = (w.CommandsPS - idle.CommandsPS) * w.Seconds / n
	r.RedisUs = 1e6 * w.RedisCPU / n
	r.RedisUsNet = 1e6 * (w.RedisCPU - idle.RedisCPU/idle.Seconds*w.Seconds) / n
	r.ReplicaUs = 1e6 * w.ReplicaCPU / n
	r.ReplicaUsNet = 1e6 * (w.ReplicaCPU - idle.ReplicaCPU/idle.Seconds*w.Seconds) / n
}

func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// WriteText writes the measurement's summary.
func (r *ReportsResults) WriteText(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "Agent reports: %d scopes, %d pods reporting every %.0f s (%.0f reports/s), %d session(s) a scope; %s, %s %s\n\n",
		r.Scopes, r.Pods, r.IntervalS, r.TargetRate, r.Sessions, r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, strings.Join(r.Flags, " "))
	fmt.Fprintln(w, "| window | sweeps | s | reports/s (errors) | report p50 / p99 ms | routes/s | route p50 / p99 / max ms | replica CPU s (% of a core) | Redis cmds/s | Redis CPU s | client CPU s | load avg |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	rows := append([]*ReportPhase{{Phase: r.Idle, Sweeps: "due + watch"}, r.Reporting}, r.Latency...)
	for _, p := range rows {
		if p == nil || p.Phase == nil {
			continue
		}
		reports, rlat := "—", "—"
		if s := p.Reports; s != nil {
			reports = fmt.Sprintf("%.0f (%d)", float64(s.OK)/p.Seconds, s.Errors)
			rlat = fmt.Sprintf("%.2f / %.2f", s.P50Ms, s.P99Ms)
		}
		routes, lat := "—", "—"
		if rs := p.Route; rs != nil {
			routes = fmt.Sprintf("%.0f", float64(rs.Routes)/p.Seconds)
			lat = fmt.Sprintf("%.2f / %.2f / %.1f", rs.P50Ms, rs.P99Ms, rs.MaxMs)
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %s | %.2f (%.1f %%) | %s | %.2f | %.2f | %s |\n", p.Name, p.Sweeps, p.Seconds, reports, rlat,
			routes, lat, p.ReplicaCPU, 100*p.ReplicaCPU/p.Seconds, rate(p.CommandsPS), p.RedisCPU, p.ClientCPU, p.LoadAvg)
	}
	fmt.Fprintf(w, "\nPer report (gross / net of the idle window): %.1f / %.1f Redis commands, %.0f / %.0f µs Redis CPU, %.0f / %.0f µs replica CPU\n",
		r.CommandsPerReport, r.CommandsPerReportNet, r.RedisUs, r.RedisUsNet, r.ReplicaUs, r.ReplicaUsNet)
	if r.Reporting != nil {
		fmt.Fprintf(w, "Commands of the reports window: %s\n", top(r.Reporting.Commands, 10))
		fmt.Fprintf(w, "At %.0f reports/s (%d pods every %.0f s): replica %.2f cores, Redis %.2f cores (from the gross figures)\n",
			r.TargetRate, r.Pods, r.IntervalS, r.TargetRate*r.ReplicaUs/1e6, r.TargetRate*r.RedisUs/1e6)
	}
	off := func(reports bool) *ReportPhase {
		i := slices.IndexFunc(r.Latency, func(p *ReportPhase) bool { return p.Sweeps == "off" && (p.Reports != nil) == reports })
		if i < 0 || r.Latency[i].Route == nil || r.Latency[i].Route.P99Ms <= 0 {
			return nil
		}
		return r.Latency[i]
	}
	for _, b := range []*ReportPhase{off(false), off(true)} {
		for _, p := range r.Latency {
			if b != nil && p.Sweeps != "off" && p.Route != nil {
				fmt.Fprintf(w, "route p99 of %q (sweeps %s) / of %q (sweeps off): %.2f×\n", p.Name, p.Sweeps, b.Name, p.Route.P99Ms/b.Route.P99Ms)
			}
		}
	}
	_, err := io.WriteString(out, w.String())
	return err
}
