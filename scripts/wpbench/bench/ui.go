package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of UIConfig.
const (
	DefaultUIScopes    = 5_000
	DefaultUIPods      = 2
	DefaultUISessions  = 3
	DefaultRefreshes   = 20
	DefaultRefreshWait = time.Second
	DefaultUIIdle      = 20 * time.Second
	// DefaultPageQuery is what the pool page asks for when it opens: the first page
	// of the summary (an older server ignores the parameters and answers every scope
	// in full).
	DefaultPageQuery = "limit=20&offset=0&sort=scope_id"
)

// UIConfig is one measurement of what the pool page's data (GET /v1/ui/state) costs
// (wpbench ui): S scopes of P pods and N sessions on a fresh redis-server and
// replica, then refreshes as an open page makes them, one RefreshWait after each
// answer, in four runs: the page's first request, the request with the details of the
// scopes it shows, two pages on one replica, and one page on each of two replicas.
type UIConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and ui.json.
	Bin, RedisScript, Dir string
	// Flags are added to `warmpool serve`'s.
	Flags []string
	// Scopes, Pods and Sessions are S, P and N; Workers the concurrency of the setup.
	Scopes, Pods, Sessions, Workers int
	// Refreshes are made by each page of each run, one RefreshWait after the last
	// answer (as the page does), their CPU less that of an idle window (Idle long) at
	// the same rate.
	Refreshes   int
	RefreshWait time.Duration
	Idle        time.Duration
	// Query is the page's first request (DefaultPageQuery when empty).
	Query string
	// SettleHorizon is that of ScaleConfig; DefaultSettleHorizon when zero.
	SettleHorizon time.Duration
	Log           io.Writer
}

func (c *UIConfig) fill() {
	defaults.Positive(&c.Scopes, DefaultUIScopes)
	defaults.Positive(&c.Pods, DefaultUIPods)
	defaults.Positive(&c.Sessions, DefaultUISessions)
	defaults.Positive(&c.Workers, DefaultWorkers)
	defaults.Positive(&c.Refreshes, DefaultRefreshes)
	defaults.Positive(&c.RefreshWait, DefaultRefreshWait)
	defaults.Positive(&c.Idle, DefaultUIIdle)
	if c.Query == "" {
		c.Query = DefaultPageQuery
	}
	if c.SettleHorizon == 0 {
		c.SettleHorizon = DefaultSettleHorizon
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// UIResults is what a pool page measurement found.
type UIResults struct {
	Started  time.Time `json:"started"`
	Machine  string    `json:"machine"`
	Scopes   int       `json:"scopes"`
	Pods     int       `json:"pods_per_scope"`
	Sessions int       `json:"sessions_per_scope"`
	Flags    []string  `json:"flags,omitempty"`
	// Detail is how many scopes the request with details named.
	Detail int      `json:"detail"`
	Runs   []*UIRun `json:"runs"`
}

// UIRun is one run of refreshes.
type UIRun struct {
	Name  string `json:"name"`
	Query string `json:"query"`
	// Answers by replica (each page made Refreshes).
	Answers []int `json:"answers"`
	// ReplicaCPUMs is each replica's CPU per answer it gave, RedisCPUMs Redis's per
	// answer of every replica, both less the idle rate; RedisCommands Redis's commands
	// per answer (those scripts run included), by command.
	ReplicaCPUMs  []float64          `json:"replica_cpu_ms_per_refresh"`
	RedisCPUMs    float64            `json:"redis_cpu_ms_per_refresh"`
	RedisCommands map[string]float64 `json:"redis_commands_per_refresh"`
	// Shared counts the answers from a pass another replica made (summary_by).
	Shared int `json:"shared"`
	// Bytes is the mean answer's size; WallMs the longest answer's time.
	Bytes   float64 `json:"bytes"`
	WallMs  float64 `json:"wall_max_ms"`
	LoadAvg string  `json:"load_avg"`
}

// uiReplica is a replica with its idle CPU rate.
type uiReplica struct {
	p    *process
	idle float64 // CPU seconds a second
}

// UI runs the pool page measurement and writes ui.json to cfg.Dir.
func UI(ctx context.Context, cfg UIConfig) (*UIResults, error) {
	cfg.fill()
	res := &UIResults{Started: time.Now().UTC(), Machine: machine(), Scopes: cfg.Scopes, Pods: cfg.Pods, Sessions: cfg.Sessions, Flags: cfg.Flags}
	sc := ScaleConfig{Bin: cfg.Bin, RedisScript: cfg.RedisScript, Dir: cfg.Dir, Workers: cfg.Workers, Log: cfg.Log}
	sc.logf("S=%d scopes of %d pods and %d sessions: fresh redis-server and replica %s", cfg.Scopes, cfg.Pods, cfg.Sessions, strings.Join(cfg.Flags, " "))
	// The replicas share the fake driver's pods (and the first one's config store), as
	// replicas of one deployment do, so that neither sweeps the other's pods away.
	flags := append(slices.Clone(cfg.Flags), "--fake-state-dir", filepath.Join(cfg.Dir, "ui", "fake"))
	e, err := sc.start(ctx, "ui", flags...)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	p := Population{Prefix: "u-", Scopes: cfg.Scopes, Pods: cfg.Pods, Sessions: cfg.Sessions}
	if err := sc.setup(ctx, e, p, &Size{}, false); err != nil {
		return nil, err
	}
	if _, err := e.settle(ctx, cfg.SettleHorizon); err != nil {
		return nil, err
	}
	first := e.replica.URL + "/v1/ui/state?" + cfg.Query
	ids, err := shownScopes(ctx, first)
	if err != nil {
		return nil, err
	}
	res.Detail = len(ids)
	detailed := cfg.Query + "&detail=" + strings.Join(ids, ",")
	r1 := &uiReplica{p: e.replica}
	if err := cfg.idle(ctx, e, r1); err != nil {
		return nil, err
	}
	for _, run := range []struct {
		name, query string
		tabs        int
	}{
		{"the page's first request, one page", cfg.Query, 1},
		{"with the details of the scopes shown, one page", detailed, 1},
		{"with the details, two pages on one replica", detailed, 2},
	} {
		r, err := cfg.refreshes(ctx, e, run.name, run.query, []*uiReplica{r1}, run.tabs)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, r)
	}
	p2, err := startReplica(ctx, cfg.Bin, filepath.Join(cfg.Dir, "ui"), "replica2", e.redis,
		append(flags, "--store", filepath.Join(cfg.Dir, "ui", "replica.db"))...)
	if err != nil {
		return nil, err
	}
	defer p2.stop()
	r2 := &uiReplica{p: p2}
	if err := cfg.idle(ctx, e, r1, r2); err != nil {
		return nil, err
	}
	r, err := cfg.refreshes(ctx, e, "with the details, one page on each of two replicas", detailed, []*uiReplica{r1, r2}, 1)
	if err != nil {
		return nil, err
	}
	res.Runs = append(res.Runs, r)
	return res, writeJSON(filepath.Join(cfg.Dir, "ui.json"), res)
}

// shownScopes reads the page's first answer and returns the scopes of its rows (of
// its scopes, from a server without rows, as many as a page has).
func shownScopes(ctx context.Context, u string) ([]string, error) {
	body, err := get(ctx, &http.Client{Timeout: time.Minute}, u)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	var st struct {
		Rows []struct {
			ScopeID string `json:"scope_id"`
		} `json:"rows"`
		Scopes []struct {
			ScopeID string `json:"scope_id"`
		} `json:"scopes"`
	}
	if err := json.NewDecoder(body).Decode(&st); err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range st.Rows {
		ids = append(ids, r.ScopeID)
	}
	if st.Rows == nil {
		for _, s := range st.Scopes[:min(len(st.Scopes), 20)] {
			ids = append(ids, s.ScopeID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("GET %s: no scope shown", u)
	}
	return ids, nil
}

// idle measures each replica's CPU while nothing asks for the page, for Idle.
func (c *UIConfig) idle(ctx context.Context, e *env, rs ...*uiReplica) error {
	before := make([]time.Duration, len(rs))
	for i, r := range rs {
		var err error
		if before[i], err = procCPU(r.p.PID); err != nil {
			return err
		}
	}
	t := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(c.Idle):
	}
	for i, r := range rs {
		cpu, err := procCPU(r.p.PID)
		if err != nil {
			return err
		}
		r.idle = (cpu - before[i]).Seconds() / time.Since(t).Seconds()
	}
	return nil
}

// refreshes runs tabs pages on each replica, each making Refreshes requests of
// query, and measures what they cost.
func (c *UIConfig) refreshes(ctx context.Context, e *env, name, query string, rs []*uiReplica, tabs int) (*UIRun, error) {
	run := &UIRun{Name: name, Query: query, Answers: make([]int, len(rs)), RedisCommands: map[string]float64{}}
	a, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	cpu0 := make([]time.Duration, len(rs))
	for i, r := range rs {
		if cpu0[i], err = procCPU(r.p.PID); err != nil {
			return nil, err
		}
	}
	var mu sync.Mutex
	var bytes int64
	var wall time.Duration
	var firstErr error
	var wg sync.WaitGroup
	pages := len(rs) * tabs
	for i, r := range rs {
		for t := range tabs {
			// The pages open at even steps of one refresh, as pages opened at random
			// times do on average, not all at once.
			start := time.Duration(i*tabs+t) * c.RefreshWait / time.Duration(pages)
			wg.Go(func() {
				hc := &http.Client{Timeout: time.Minute}
				select {
				case <-ctx.Done():
					return
				case <-time.After(start):
				}
				for range c.Refreshes {
					t0 := time.Now()
					n, other, err := readState(ctx, hc, r.p.URL+"/v1/ui/state?"+query)
					took := time.Since(t0)
					mu.Lock()
					if other {
						run.Shared++
					}
					if err != nil && firstErr == nil {
						firstErr = err
					}
					run.Answers[i]++
					bytes += n
					wall = max(wall, took)
					mu.Unlock()
					if err != nil {
						return
					}
					select {
					case <-ctx.Done():
						return
					case <-time.After(c.RefreshWait):
					}
				}
			})
		}
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	b, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	secs := b.at.Sub(a.at).Seconds()
	total := 0
	for i, r := range rs {
		cpu, err := procCPU(r.p.PID)
		if err != nil {
			return nil, err
		}
		busy := (cpu - cpu0[i]).Seconds() - r.idle*secs
		run.ReplicaCPUMs = append(run.ReplicaCPUMs, 1000*busy/float64(run.Answers[i]))
		total += run.Answers[i]
	}
	run.RedisCPUMs = 1000 * (b.redis.CPU - a.redis.CPU).Seconds() / float64(total)
	for cmd, n := range b.redis.Calls {
		if d := n - a.redis.Calls[cmd]; d > 0 && cmd != "info" {
			run.RedisCommands[cmd] = float64(d) / float64(total)
		}
	}
	run.Bytes = float64(bytes) / float64(total)
	run.WallMs = float64(wall) / float64(time.Millisecond)
	run.LoadAvg = loadAvg()
	(&ScaleConfig{Log: c.Log}).logf("  %s: replica CPU %s ms, Redis %.1f ms, %.0f bytes a refresh (longest %.0f ms; %d of %d answers from another replica's pass; load %s)", name,
		msList(run.ReplicaCPUMs), run.RedisCPUMs, run.Bytes, run.WallMs, run.Shared, total, run.LoadAvg)
	return run, nil
}

// readState GETs u and returns the size of its 200 answer, and whether its summary
// came from another replica.
func readState(ctx context.Context, hc *http.Client, u string) (int64, bool, error) {
	body, err := get(ctx, hc, u)
	if err != nil {
		return 0, false, err
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return 0, false, err
	}
	var st struct {
		InstanceID string `json:"instance_id"`
		SummaryBy  string `json:"summary_by"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, false, fmt.Errorf("GET %s: %w", u, err)
	}
	return int64(len(b)), st.SummaryBy != "" && st.SummaryBy != st.InstanceID, nil
}

func msList(v []float64) string { return floatList(v, "%.1f") }

// floatList formats each of v with format, joined by " / ".
func floatList(v []float64, format string) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " / ")
}

// WriteText writes the results as the lines of docs/performance.md.
func (r *UIResults) WriteText(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "pool page run of %s on %s; S = %d scopes of %d pods and %d sessions; serve flags: %s\n",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Scopes, r.Pods, r.Sessions, strings.Join(r.Flags, " "))
	for _, run := range r.Runs {
		fmt.Fprintf(w, "%s (%v answers, %d from another replica's pass): replica CPU %s ms, Redis CPU %.1f ms, %.0f bytes a refresh; longest %.0f ms; load %s; Redis commands a refresh %s\n",
			run.Name, run.Answers, run.Shared, msList(run.ReplicaCPUMs), run.RedisCPUMs, run.Bytes, run.WallMs, run.LoadAvg, top(run.RedisCommands, 4))
	}
	_, err := io.WriteString(out, w.String())
	return err
}
