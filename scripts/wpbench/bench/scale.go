// Package bench holds warmpool's scale benchmark and the warm-route baseline
// comparison (driven by scripts/wpbench): they start a throwaway redis-server
// (scripts/redis.sh) and `warmpool serve --driver fake`, create scopes, pods and
// sessions through the HTTP API, and measure what the replica and Redis spend: CPU
// (/proc), commands (INFO commandstats, and the replica's script calls from /metrics),
// memory (INFO used_memory, VmRSS), sweep runs and route latency.
package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of ScaleConfig.
const (
	DefaultPods        = 1
	DefaultSessions    = 1
	DefaultIdle        = 60 * time.Second
	DefaultRoute       = 60 * time.Second
	DefaultRate        = 500
	DefaultWorkers     = 32
	DefaultPassSize    = 10_000
	DefaultRSSSessions = 100_000
	DefaultRSSHold     = 20 * time.Second
	settleTimeout      = 3 * time.Minute
	// DefaultSettleHorizon outlasts the claims the setup's cold routes note.
	DefaultSettleHorizon = time.Minute
	DefaultScrapePause   = 5 * time.Second
	// probeCommands is what one health probe of a live pod costs Redis, as INFO
	// counts commands (those a script runs included): the EVALSHA of pod_health.lua,
	// the deadline guard's TIME, its ZSCORE and HDEL.
	probeCommands = 4
)

// DefaultSizes are the scope counts of a scale run.
var DefaultSizes = []int{1_000, 10_000, 50_000, 100_000}

// ScaleConfig is one scale run. Zero fields take the defaults above.
type ScaleConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and results.json.
	Bin, RedisScript, Dir string
	// Sizes are the scope counts S, each measured on a fresh Redis and replica
	// (DefaultSizes when nil; none when empty).
	Sizes []int
	// Pods and Sessions per scope (P and N).
	Pods, Sessions int
	// Idle and Route are the lengths of the idle and the routing phase.
	Idle, Route time.Duration
	// Rate is the affinity routes per second of the routing phases; Workers their
	// concurrency, and that of the setup.
	Rate    float64
	Workers int
	// PassSize is S of the comparison of route latency while full sweep passes run
	// back to back against sweeps off (negative: skipped).
	PassSize int
	// RSSSessions is how many sessions the RSS run binds (negative: skipped); the
	// RSS is sampled as they are bound and for RSSHold after.
	RSSSessions int
	RSSHold     time.Duration
	// SettleHorizon: before a window opens, no scope may be due this soon (negative:
	// none may be due now); DefaultSettleHorizon when zero.
	SettleHorizon time.Duration
	// ScrapePause is how long a window waits after the scrape of /metrics before it,
	// for the replica to collect the scrape's garbage (negative: not at all);
	// DefaultScrapePause when zero.
	ScrapePause time.Duration
	// Log gets progress lines.
	Log io.Writer
}

func (c *ScaleConfig) fill() {
	if c.Sizes == nil {
		c.Sizes = DefaultSizes
	}
	defaults.Positive(&c.Pods, DefaultPods)
	defaults.Positive(&c.Sessions, DefaultSessions)
	defaults.Positive(&c.Workers, DefaultWorkers)
	// Negative skips the run: only zero takes the default.
	if c.PassSize == 0 {
		c.PassSize = DefaultPassSize
	}
	if c.RSSSessions == 0 {
		c.RSSSessions = DefaultRSSSessions
	}
	defaults.Positive(&c.Idle, DefaultIdle)
	defaults.Positive(&c.Route, DefaultRoute)
	defaults.Positive(&c.RSSHold, DefaultRSSHold)
	if c.SettleHorizon == 0 {
		c.SettleHorizon = DefaultSettleHorizon
	}
	if c.ScrapePause == 0 {
		c.ScrapePause = DefaultScrapePause
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// ScaleResults is what a scale run measured.
type ScaleResults struct {
	Started  time.Time `json:"started"`
	Machine  string    `json:"machine"`
	Pods     int       `json:"pods_per_scope"`
	Sessions int       `json:"sessions_per_scope"`
	Rate     float64   `json:"route_rate"`
	Sizes    []*Size   `json:"sizes"`
	// Pass compares route latency while full passes run with sweeps off.
	Pass *PassCompare `json:"pass,omitempty"`
	// RSS is the replica's RSS as it binds sessions.
	RSS *RSSRun `json:"rss,omitempty"`
}

// Size is the measurement of one scope count.
type Size struct {
	Scopes int `json:"scopes"`
	// SetupSeconds: storing the configs, then binding every session (deploying the
	// pods on the way).
	ConfigSeconds float64 `json:"config_seconds"`
	RouteSeconds  float64 `json:"route_seconds"`
	// Redis used_memory per scope: its config alone, and with its pods and sessions.
	ConfigBytesPerScope float64 `json:"config_bytes_per_scope"`
	BytesPerScope       float64 `json:"bytes_per_scope"`
	// FreshRSS and FreshAnon are the replica's VmRSS and its anonymous part
	// (RssAnon) before the setup, in bytes: what a phase's per-scope figures are
	// counted from.
	FreshRSS  int64 `json:"fresh_rss_bytes"`
	FreshAnon int64 `json:"fresh_rss_anon_bytes"`
	// Unsettled counts scopes still due when the idle phase began (0 normally).
	Unsettled int `json:"unsettled"`
	// MetricsSeconds and MetricsBytes: one whole scrape of /metrics after the phases.
	MetricsSeconds float64 `json:"metrics_scrape_seconds"`
	MetricsBytes   int64   `json:"metrics_scrape_bytes"`
	Idle           *Phase  `json:"idle"`
	Routing        *Phase  `json:"routing"`
}

// Phase is what one measured window cost.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// LoadAvg is /proc/loadavg at the end of the window.
	LoadAvg string `json:"load_avg"`
	// ReplicaCPU and RedisCPU are CPU seconds used in the window.
	ReplicaCPU float64 `json:"replica_cpu_s"`
	RedisCPU   float64 `json:"redis_cpu_s"`
	// Commands per second by command (INFO commandstats, which counts the commands
	// scripts run too; the benchmark's own INFO calls left out), and their total.
	Commands   map[string]float64 `json:"commands_per_s"`
	CommandsPS float64            `json:"commands_total_per_s"`
	// Scripts per second by script, as the replica counted its calls.
	Scripts map[string]float64 `json:"scripts_per_s"`
	// ProbesPS are health probe scripts per second (pod_health); BeyondProbesPS the
	// commands but the probes' (probeCommands each).
	ProbesPS       float64 `json:"probes_per_s"`
	BeyondProbesPS float64 `json:"beyond_probes_per_s"`
	// Sweeps by job kind (due, watch, reconcile): runs and how long each held its lock.
	Sweeps map[string]SweepStats `json:"sweeps"`
	// RSS is the replica's VmRSS at the end, in bytes; Anon its anonymous part
	// (RssAnon: heap, stacks, runtime). The rest is file-backed, the binary's pages
	// as its code runs, which no scope adds to.
	RSS  int64 `json:"rss_bytes"`
	Anon int64 `json:"rss_anon_bytes"`
	// UsedMemory is Redis's used_memory at the end, in bytes.
	UsedMemory int64       `json:"used_memory_bytes"`
	Route      *RouteStats `json:"route,omitempty"`
}

// SweepStats are the runs of one kind of sweeper job in a window.
type SweepStats struct {
	Runs   int     `json:"runs"`
	MeanMs float64 `json:"mean_ms"`
	// MaxMs is an upper bound of the longest run: the histogram bucket that holds it
	// (-1: the +Inf one, past the last bound).
	MaxMs float64 `json:"max_ms_bound"`
}

// scrapedMetrics are the only metric families a window reads: /metrics gathers every
// scope's pool gauges and per-scope series, which at tens of thousands of scopes
// takes seconds and hundreds of megabytes, so a scrape stays out of every window and
// its text is cut down to these.
var scrapedMetrics = []string{"warmpool_sweeper_runs_total", "warmpool_sweeper_lock_held_seconds", "warmpool_redis_script_duration_seconds"}

// PerScope is what each scope added to the replica's RSS and to its anonymous part by
// the end of p, and to Redis's used_memory (its config, pods and sessions), in bytes.
// (The heap in use the replica exports is no measure of it: the scrape that reads it
// gathers every scope's gauges first. docs/performance.md has the live heap from heap
// profiles.)
func (s *Size) PerScope(p *Phase) (rss, anon, redis float64) {
	n := float64(s.Scopes)
	return float64(p.RSS-s.FreshRSS) / n, float64(p.Anon-s.FreshAnon) / n, s.BytesPerScope
}

func (c *ScaleConfig) logf(format string, a ...any) {
	_, _ = fmt.Fprintf(c.Log, "%s  "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, a...)...)
}

// setup stores p's configs and binds its sessions, and reports the memory they took;
// with settle it then waits for the sweeps the setup made due.
func (c *ScaleConfig) setup(ctx context.Context, e *env, p Population, sz *Size, settle bool) error {
	m0, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return err
	}
	t := time.Now()
	if err := e.cl.putConfigs(ctx, p, c.Workers); err != nil {
		return fmt.Errorf("configs: %w", err)
	}
	sz.ConfigSeconds = time.Since(t).Seconds()
	m1, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return err
	}
	c.logf("  %d configs stored in %.1fs", p.Scopes, sz.ConfigSeconds)
	t = time.Now()
	if err := e.cl.routeAll(ctx, p, c.Workers); err != nil {
		return fmt.Errorf("routes: %w", err)
	}
	sz.RouteSeconds = time.Since(t).Seconds()
	m2, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return err
	}
	c.logf("  %d sessions bound (%d pods deployed) in %.1fs", p.Scopes*p.Sessions, p.Scopes*p.Pods, sz.RouteSeconds)
	sz.ConfigBytesPerScope = float64(m1.UsedMemory-m0.UsedMemory) / float64(p.Scopes)
	sz.BytesPerScope = float64(m2.UsedMemory-m0.UsedMemory) / float64(p.Scopes)
	if settle {
		sz.Unsettled, err = e.settle(ctx, c.SettleHorizon)
	}
	return err
}

func (c *ScaleConfig) population(prefix string, scopes int) Population {
	return Population{Prefix: prefix, Scopes: scopes, Pods: c.Pods, Sessions: c.Sessions}
}

func (c *ScaleConfig) routing(e *env, p Population) func(ctx context.Context) RouteStats {
	return func(ctx context.Context) RouteStats { return e.cl.routeLoad(ctx, p, c.Route, c.Rate, c.Workers) }
}

// Scale runs the scale benchmark: for each size a fresh Redis and replica (default
// sweep settings), the setup, an idle phase and a phase of steady affinity routes;
// then the full-pass comparison and the RSS run. It writes results.json to cfg.Dir.
func Scale(ctx context.Context, cfg ScaleConfig) (*ScaleResults, error) {
	cfg.fill()
	res := &ScaleResults{Started: time.Now().UTC(), Machine: machine(), Pods: cfg.Pods, Sessions: cfg.Sessions, Rate: cfg.Rate}
	for _, n := range cfg.Sizes {
		sz, err := cfg.size(ctx, n)
		if err != nil {
			return res, fmt.Errorf("%d scopes: %w", n, err)
		}
		res.Sizes = append(res.Sizes, sz)
	}
	if cfg.PassSize > 0 {
		pc, err := cfg.passCompare(ctx)
		if err != nil {
			return res, fmt.Errorf("full-pass comparison: %w", err)
		}
		res.Pass = pc
	}
	if cfg.RSSSessions > 0 {
		r, err := cfg.rssRun(ctx)
		if err != nil {
			return res, fmt.Errorf("RSS run: %w", err)
		}
		res.RSS = r
	}
	return res, writeJSON(filepath.Join(cfg.Dir, "results.json"), res)
}

func (c *ScaleConfig) size(ctx context.Context, n int) (*Size, error) {
	c.logf("S=%d: fresh redis-server and replica (default sweep settings)", n)
	e, err := c.start(ctx, fmt.Sprintf("s%d", n))
	if err != nil {
		return nil, err
	}
	defer e.stop()
	p := c.population("scale-", n)
	sz := &Size{Scopes: n}
	if err := procStatus(e.replica.PID, map[string]*int64{"VmRSS": &sz.FreshRSS, "RssAnon": &sz.FreshAnon}); err != nil {
		return nil, err
	}
	c.logf("  fresh replica: RSS %.1f MB (anonymous %.1f MB)", mb(sz.FreshRSS), mb(sz.FreshAnon))
	if err := c.setup(ctx, e, p, sz, true); err != nil {
		return nil, err
	}
	c.logf("  idle for %v", c.Idle)
	if sz.Idle, err = e.measure(ctx, "idle", c.Idle, nil); err != nil {
		return nil, err
	}
	c.logf("  %s", sz.Idle.oneLine())
	c.logf("  %s", sz.perScopeLine(sz.Idle))
	c.logf("  affinity routes at %.0f/s for %v", c.Rate, c.Route)
	if sz.Routing, err = e.measure(ctx, "routing", 0, c.routing(e, p)); err != nil {
		return nil, err
	}
	c.logf("  %s", sz.Routing.oneLine())
	c.logf("  %s", sz.perScopeLine(sz.Routing))
	t := time.Now()
	if sz.MetricsBytes, err = fullScrape(ctx, e.replica.URL+"/metrics"); err != nil {
		return nil, err
	}
	sz.MetricsSeconds = time.Since(t).Seconds()
	c.logf("  a whole /metrics scrape: %.1f MB in %.1fs", mb(sz.MetricsBytes), sz.MetricsSeconds)
	return sz, nil
}

// rssScopes share the RSS run's sessions: 10 scopes, one pod each.
const rssScopes = 10

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// machine names the CPUs, their count and the kernel.
func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	release, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return fmt.Sprintf("%d CPUs, %s, Linux %s", numCPU(), model, strings.TrimSpace(string(release)))
}
