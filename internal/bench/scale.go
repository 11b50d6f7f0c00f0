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
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/lua"
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
var DefaultSizes = []int{1_000, 10_000, 50_000}

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
	// RSS is the replica's VmRSS at the end, in bytes.
	RSS int64 `json:"rss_bytes"`
	// UsedMemory is Redis's used_memory at the end, in bytes.
	UsedMemory int64       `json:"used_memory_bytes"`
	Route      *RouteStats `json:"route,omitempty"`
}

// SweepStats are the runs of one kind of sweeper job in a window.
type SweepStats struct {
	Runs   int     `json:"runs"`
	MeanMs float64 `json:"mean_ms"`
	// MaxMs is an upper bound of the longest run: the histogram bucket that holds it.
	MaxMs float64 `json:"max_ms_bound"`
}

// PassCompare is route latency with sweeps off and while full passes run back to back.
type PassCompare struct {
	Scopes int    `json:"scopes"`
	Off    *Phase `json:"sweeps_off"`
	// NoPass sweeps as usual (due and watch jobs) without the full pass, so On's
	// difference to it is the pass's alone.
	NoPass *Phase `json:"sweeps_without_pass"`
	On     *Phase `json:"full_passes"`
}

// RSSRun is the replica's RSS and Redis's memory as sessions are bound.
type RSSRun struct {
	Scopes int         `json:"scopes"`
	Steps  []RSSSample `json:"steps"`
	// HoldMaxRSS is the largest RSS sampled while the sessions were held afterwards.
	HoldMaxRSS int64 `json:"hold_max_rss_bytes"`
	// BytesPerSession is Redis used_memory per bound session, from the first to the
	// last step.
	BytesPerSession float64 `json:"bytes_per_session"`
	Hold            *Phase  `json:"hold"`
}

// RSSSample is one step of an RSS run.
type RSSSample struct {
	Sessions int   `json:"sessions"`
	RSS      int64 `json:"rss_bytes"`
	// Anon and File split RSS: anonymous memory (the Go heap, stacks and runtime)
	// and pages of mapped files (the binary's code and read-only data, faulted in
	// as code paths first run).
	Anon       int64 `json:"rss_anon_bytes"`
	File       int64 `json:"rss_file_bytes"`
	UsedMemory int64 `json:"used_memory_bytes"`
}

// env is one Redis and one replica under measurement.
type env struct {
	redis   *redisServer
	replica *process
	hc      *http.Client
	cl      *client
	// bare: the process under measurement serves no /metrics (the baseline).
	bare bool
	// metrics is the last scrape of the replica's window metrics, taken at metricsAt.
	metrics   series
	metricsAt time.Time
	// pause lets the replica collect the garbage of a scrape before a window opens.
	pause time.Duration
}

func (c *ScaleConfig) start(ctx context.Context, name string, flags ...string) (*env, error) {
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r, err := startRedis(ctx, c.RedisScript, filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	p, err := startReplica(ctx, c.Bin, dir, "replica", r, flags...)
	if err != nil {
		r.stop()
		return nil, err
	}
	return &env{redis: r, replica: p, hc: &http.Client{Timeout: 5 * time.Minute}, cl: newClient(p.URL, c.Workers+8), pause: max(c.ScrapePause, 0)}, nil
}

func (e *env) stop() {
	e.replica.stop()
	e.redis.stop()
}

// sample is Redis's and the process's counters at one end of a window.
type sample struct {
	at    time.Time
	cpu   time.Duration
	redis redisStats
}

func (e *env) take(ctx context.Context) (sample, error) {
	st, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return sample{}, err
	}
	cpu, err := procCPU(e.replica.PID)
	return sample{at: time.Now(), cpu: cpu, redis: st}, err
}

// scrapedMetrics are the only metric families a window reads: /metrics gathers every
// scope's pool gauges and per-scope series, which at tens of thousands of scopes
// takes seconds and hundreds of megabytes, so a scrape stays out of every window and
// its text is cut down to these.
var scrapedMetrics = []string{"warmpool_sweeper_runs_total", "warmpool_sweeper_lock_held_seconds", "warmpool_redis_script_duration_seconds"}

// scrapeMetrics reads the metric families of a window into e.metrics.
func (e *env) scrapeMetrics(ctx context.Context) error {
	u := e.replica.URL + "/metrics?"
	for i, n := range scrapedMetrics {
		if i > 0 {
			u += "&"
		}
		u += "name[]=" + n
	}
	m, err := scrape(ctx, e.hc, u)
	e.metrics, e.metricsAt = m, time.Now()
	return err
}

// measure runs work (nil: the window stays idle for d) between two samples. The
// replica's counters come from the scrapes around the window (the last one of the
// window before, if any), so their rates are over a little more than the window.
func (e *env) measure(ctx context.Context, name string, d time.Duration, work func(ctx context.Context) RouteStats) (*Phase, error) {
	var before series
	var beforeAt time.Time
	if !e.bare {
		if e.metrics == nil {
			if err := e.scrapeMetrics(ctx); err != nil {
				return nil, err
			}
		}
		before, beforeAt = e.metrics, e.metricsAt
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(e.pause):
		}
	}
	a, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	var rs *RouteStats
	if work != nil {
		st := work(ctx)
		rs = &st
	} else {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
	b, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	rss, err := procRSS(e.replica.PID)
	if err != nil {
		return nil, err
	}
	ph := &Phase{Name: name, LoadAvg: loadAvg(), Route: rs, UsedMemory: b.redis.UsedMemory,
		Commands: map[string]float64{}, Scripts: map[string]float64{}, Sweeps: map[string]SweepStats{}}
	ph.Seconds = b.at.Sub(a.at).Seconds()
	ph.ReplicaCPU = (b.cpu - a.cpu).Seconds()
	ph.RedisCPU = (b.redis.CPU - a.redis.CPU).Seconds()
	for cmd, n := range b.redis.Calls {
		if cmd == "info" {
			continue
		}
		if v := float64(n-a.redis.Calls[cmd]) / ph.Seconds; v > 0 {
			ph.Commands[cmd] = v
			ph.CommandsPS += v
		}
	}
	ph.RSS = rss
	if e.bare {
		return ph, nil
	}
	if err := e.scrapeMetrics(ctx); err != nil {
		return nil, err
	}
	m, mSeconds := e.metrics.delta(before), e.metricsAt.Sub(beforeAt).Seconds()
	for script, n := range m.byLabel("warmpool_redis_script_duration_seconds_count", "script") {
		if n > 0 {
			ph.Scripts[script] = n / mSeconds
		}
	}
	ph.ProbesPS = ph.Scripts["pod_health"]
	ph.BeyondProbesPS = ph.CommandsPS - probeCommands*ph.ProbesPS
	for _, kind := range []string{"due", "watch", "reconcile"} {
		match := `sweep="` + kind
		runs := m.sum("warmpool_sweeper_runs_total", match) - m.sum("warmpool_sweeper_runs_total", match, `outcome="skipped"`)
		st := SweepStats{Runs: int(runs)}
		if n := m.sum("warmpool_sweeper_lock_held_seconds_count", match); n > 0 {
			st.MeanMs = 1000 * m.sum("warmpool_sweeper_lock_held_seconds_sum", match) / n
			st.MaxMs = 1000 * m.histMax("warmpool_sweeper_lock_held_seconds", match)
		}
		ph.Sweeps[kind] = st
	}
	return ph, nil
}

// settle waits until no scope is due within horizon, at most settleTimeout, and
// returns how many still are. The setup leaves work due at once (each publish) and a
// little later (each cold route notes its claim's deadline, rm.DefaultClaimTTL on):
// the sweeps that find nothing else to do must be over before a window opens.
func (e *env) settle(ctx context.Context, horizon time.Duration) (int, error) {
	keys := lua.NewKeyspace("")
	deadline := time.Now().Add(settleTimeout)
	for {
		now := fmt.Sprint(time.Now().Add(max(horizon, 0)).UnixMilli())
		due := 0
		for k := range lua.DueShards {
			n, err := e.redis.rdb.ZCount(ctx, keys.DueIndex(k), "-inf", now).Result()
			if err != nil {
				return 0, err
			}
			due += int(n)
		}
		if due == 0 || time.Now().After(deadline) {
			return due, nil
		}
		select {
		case <-ctx.Done():
			return due, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// logf writes a progress line for a terminal: the run does not depend on it.
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
	if err := c.setup(ctx, e, p, sz, true); err != nil {
		return nil, err
	}
	c.logf("  idle for %v", c.Idle)
	if sz.Idle, err = e.measure(ctx, "idle", c.Idle, nil); err != nil {
		return nil, err
	}
	c.logf("  %s", sz.Idle.oneLine())
	c.logf("  affinity routes at %.0f/s for %v", c.Rate, c.Route)
	if sz.Routing, err = e.measure(ctx, "routing", 0, c.routing(e, p)); err != nil {
		return nil, err
	}
	c.logf("  %s", sz.Routing.oneLine())
	t := time.Now()
	if sz.MetricsBytes, err = fullScrape(ctx, e.replica.URL+"/metrics"); err != nil {
		return nil, err
	}
	sz.MetricsSeconds = time.Since(t).Seconds()
	c.logf("  a whole /metrics scrape: %.1f MB in %.1fs", mb(sz.MetricsBytes), sz.MetricsSeconds)
	return sz, nil
}

// passCompare measures the routing phase at PassSize scopes three times, each on a
// fresh setup: with every sweep off, with the due and watch jobs but no full pass, and
// with the full pass running back to back besides them.
func (c *ScaleConfig) passCompare(ctx context.Context) (*PassCompare, error) {
	pc := &PassCompare{Scopes: c.PassSize}
	runs := []struct {
		name  string
		flags []string
		into  **Phase
		// sweeps: the replica sweeps, so the setup's due work is awaited.
		sweeps bool
	}{
		{"sweeps-off", []string{"--sweep-interval", "1h"}, &pc.Off, false},
		{"no-full-pass", []string{"--reconcile-interval", "1h"}, &pc.NoPass, true},
		{"full-passes", []string{"--reconcile-interval", "1s"}, &pc.On, true},
	}
	for _, r := range runs {
		c.logf("S=%d, %s (%s)", c.PassSize, r.name, strings.Join(r.flags, " "))
		e, err := c.start(ctx, r.name, r.flags...)
		if err != nil {
			return nil, err
		}
		p := c.population("pass-", c.PassSize)
		err = c.setup(ctx, e, p, &Size{}, r.sweeps)
		if err == nil {
			*r.into, err = e.measure(ctx, r.name, 0, c.routing(e, p))
		}
		e.stop()
		if err != nil {
			return nil, err
		}
		c.logf("  %s", (*r.into).oneLine())
	}
	return pc, nil
}

// rssScopes share the RSS run's sessions: 10 scopes, one pod each.
const rssScopes = 10

// rssRun binds RSSSessions sessions on rssScopes scopes of one pod each, in ten steps,
// sampling the replica's RSS and Redis's memory, then holds them for RSSHold while
// full passes run every 5 s (each reading every scope).
func (c *ScaleConfig) rssRun(ctx context.Context) (*RSSRun, error) {
	c.logf("RSS run: %d sessions on %d scopes (--reconcile-interval 5s)", c.RSSSessions, rssScopes)
	e, err := c.start(ctx, "rss", "--reconcile-interval", "5s")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	per := max(1, c.RSSSessions/rssScopes)
	p := Population{Prefix: "rss-", Scopes: rssScopes, Pods: 1, Sessions: per}
	if err := e.cl.putConfigs(ctx, p, c.Workers); err != nil {
		return nil, err
	}
	r := &RSSRun{Scopes: rssScopes}
	step := func(n int) error {
		st := RSSSample{Sessions: n * rssScopes}
		if err := procStatus(e.replica.PID, map[string]*int64{"VmRSS": &st.RSS, "RssAnon": &st.Anon, "RssFile": &st.File}); err != nil {
			return err
		}
		m, err := readRedis(ctx, e.redis.rdb)
		if err != nil {
			return err
		}
		st.UsedMemory = m.UsedMemory
		r.Steps = append(r.Steps, st)
		return nil
	}
	if err := step(0); err != nil {
		return nil, err
	}
	// The first session of each scope deploys its pod; the memory per session is
	// counted from there.
	bound := 0
	for _, to := range append([]int{1}, steps(per, 10)...) {
		err := parallel(ctx, rssScopes, rssScopes, func(ctx context.Context, i int) error {
			for j := bound; j < to; j++ {
				if err := e.cl.route(ctx, p.scope(i), p.session(j)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		bound = to
		if err := step(to); err != nil {
			return nil, err
		}
	}
	first, last := r.Steps[1], r.Steps[len(r.Steps)-1]
	if n := last.Sessions - first.Sessions; n > 0 {
		r.BytesPerSession = float64(last.UsedMemory-first.UsedMemory) / float64(n)
	}
	c.logf("  bound; holding them for %v", c.RSSHold)
	stop := make(chan struct{})
	maxRSS := make(chan int64)
	go func() {
		var m int64
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := procRSS(e.replica.PID); err == nil {
				m = max(m, v)
			}
			select {
			case <-stop:
				maxRSS <- m
				return
			case <-t.C:
			}
		}
	}()
	r.Hold, err = e.measure(ctx, "hold", c.RSSHold, nil)
	close(stop)
	r.HoldMaxRSS = <-maxRSS
	return r, err
}

// steps splits [1, n] into k even steps, ending at n.
func steps(n, k int) []int {
	var out []int
	for i := 1; i <= k; i++ {
		if v := n * i / k; v > 1 && (len(out) == 0 || v > out[len(out)-1]) {
			out = append(out, v)
		}
	}
	return out
}

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
