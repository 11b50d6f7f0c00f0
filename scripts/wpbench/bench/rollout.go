package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
)

// The defaults of the rollout measurement (wpbench rollout).
const (
	DefaultRolloutDelay  = 2 * time.Second
	DefaultRolloutRate   = 10.0
	DefaultRolloutLife   = time.Second
	DefaultRolloutWarmup = 8 * time.Second
	DefaultRolloutBefore = 4 * time.Second
	DefaultRolloutAfter  = 10 * time.Second
	// DefaultRolloutMinIdle is the scope's min_idle_pods: at the default load, the
	// pods of its sessions (rate × life = 10 sessions on pods of 4).
	DefaultRolloutMinIdle = 3
)

// rolloutScope is the scope the measurement routes to.
const rolloutScope = "rollout"

// RolloutConfig is a rollout measurement: for each rollout ("drain", "prewarm"), a
// fresh redis-server and one replica with the fake driver taking Delay per deploy, a
// scope kept warm (MinIdle pods of 4 sessions), a steady load of Rate new sessions a
// second each ended after Life, which runs Warmup to reach its steady state, then
// Before, then a PUT of a new image and After it.
type RolloutConfig struct {
	Bin, RedisScript, Dir string
	Delay, Life           time.Duration
	Warmup, Before, After time.Duration
	Rate                  float64
	MinIdle               int
	Log                   io.Writer
}

func (c *RolloutConfig) fill() {
	if c.Delay <= 0 {
		c.Delay = DefaultRolloutDelay
	}
	if c.Rate <= 0 {
		c.Rate = DefaultRolloutRate
	}
	if c.Life <= 0 {
		c.Life = DefaultRolloutLife
	}
	if c.Warmup <= 0 {
		c.Warmup = DefaultRolloutWarmup
	}
	if c.MinIdle <= 0 {
		c.MinIdle = DefaultRolloutMinIdle
	}
	if c.Before <= 0 {
		c.Before = DefaultRolloutBefore
	}
	if c.After <= 0 {
		c.After = DefaultRolloutAfter
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// RolloutResults are the runs of a rollout measurement.
type RolloutResults struct {
	Machine string        `json:"machine"`
	DelayMs float64       `json:"deploy_delay_ms"`
	Rate    float64       `json:"rate"`
	LifeMs  float64       `json:"session_life_ms"`
	MinIdle int           `json:"min_idle_pods"`
	Runs    []*RolloutRun `json:"runs"`
}

// RolloutRun is one rollout's routes in each window: the warm-up (the load reaching
// its steady state), the steady load before the PUT and the load after it.
type RolloutRun struct {
	Rollout string         `json:"rollout"`
	Warmup  *RolloutWindow `json:"warmup"`
	Before  *RolloutWindow `json:"before"`
	After   *RolloutWindow `json:"after"`
}

// RolloutWindow is the routes sent in one window: Sources counts them by how the
// replica served them (warmpool_routes_total between the window's scrapes), Cold those
// that waited for a deploy (deployed, follower), Slow those the client saw take over
// half the deploy delay, Failed those not answered 200, MaxMs the slowest.
type RolloutWindow struct {
	Routes  int            `json:"routes"`
	Sources map[string]int `json:"sources"`
	Cold    int            `json:"cold"`
	Slow    int            `json:"slow"`
	Failed  int            `json:"failed"`
	MaxMs   float64        `json:"max_route_ms"`
}

// Rollout runs the measurement.
func Rollout(ctx context.Context, cfg RolloutConfig) (*RolloutResults, error) {
	cfg.fill()
	res := &RolloutResults{Machine: machine(), DelayMs: ms(cfg.Delay), Rate: cfg.Rate, LifeMs: ms(cfg.Life), MinIdle: cfg.MinIdle}
	for _, rollout := range []string{warmpool.RolloutDrain, warmpool.RolloutPrewarm} {
		run, err := cfg.run(ctx, rollout)
		if err != nil {
			return res, fmt.Errorf("rollout %s: %w", rollout, err)
		}
		res.Runs = append(res.Runs, run)
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// scopeConfig is the scope's config with image.
func (c *RolloutConfig) scopeConfig(image, rollout string) warmpool.ScopeConfig {
	s := warmpool.DefaultScopeConfig()
	s.Deploy.Image, s.Deploy.ReadyTimeoutS = image, 30
	s.Pool.MaxConcurrency, s.Pool.PodConcurrency, s.Pool.MinIdlePods = 80, 4, c.MinIdle
	s.Pool.SessionTTLS, s.Pool.WaitTimeoutS, s.Pool.Rollout = 60, 30, rollout
	return s
}

func (c *RolloutConfig) run(ctx context.Context, rollout string) (*RolloutRun, error) {
	sc := ScaleConfig{Dir: c.Dir, RedisScript: c.RedisScript, Bin: c.Bin, Workers: 32}
	e, err := sc.start(ctx, rollout, "--fake-deploy-delay", c.Delay.String())
	if err != nil {
		return nil, err
	}
	defer e.stop()
	_, _ = fmt.Fprintf(c.Log, "rollout %s: replica %s, files in %s\n", rollout, e.replica.URL, filepath.Join(c.Dir, rollout)) // progress: nothing to do if it fails
	path := "/v1/scopes/" + rolloutScope
	if err := e.cl.do(ctx, http.MethodPut, path+"/config", c.scopeConfig("agent:1", rollout)); err != nil {
		return nil, err
	}
	if err := e.warm(ctx, path, c.MinIdle); err != nil {
		return nil, err
	}
	run := &RolloutRun{Rollout: rollout, Warmup: &RolloutWindow{}, Before: &RolloutWindow{}, After: &RolloutWindow{}}
	windows := []*RolloutWindow{run.Warmup, run.Before, run.After}
	ends := []time.Duration{c.Warmup, c.Warmup + c.Before, c.Warmup + c.Before + c.After}
	metrics := e.replica.URL + "/metrics?name[]=warmpool_routes_total"
	scrapes := make([]series, 0, len(windows)+1)
	first, err := scrape(ctx, e.hc, metrics)
	if err != nil {
		return nil, err
	}
	scrapes = append(scrapes, first)
	var mu sync.Mutex
	var wg sync.WaitGroup
	slowOver := c.Delay / 2
	tick := time.NewTicker(time.Duration(float64(time.Second) / c.Rate))
	defer tick.Stop()
	start, cur := time.Now(), 0
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		for cur < len(windows) && time.Since(start) >= ends[cur] {
			// the window's last routes are answered before its scrape
			wg.Wait()
			m, err := scrape(ctx, e.hc, metrics)
			if err != nil {
				return nil, err
			}
			scrapes = append(scrapes, m)
			cur++
			if cur == 2 {
				if err := e.cl.do(ctx, http.MethodPut, path+"/config", c.scopeConfig("agent:2", rollout)); err != nil {
					return nil, err
				}
			}
		}
		if cur == len(windows) {
			break
		}
		w := windows[cur]
		wg.Add(1)
		go func(session string) {
			defer wg.Done()
			t0 := time.Now()
			err := e.cl.do(ctx, http.MethodPost, path+"/sessions", map[string]string{"session_id": session})
			took := time.Since(t0)
			mu.Lock()
			w.Routes++
			w.MaxMs = max(w.MaxMs, ms(took))
			switch {
			case err != nil:
				w.Failed++
			case took > slowOver:
				w.Slow++
			}
			mu.Unlock()
			if err != nil {
				return
			}
			// the session ends after its life, unless the window closes first
			go func() {
				select {
				case <-ctx.Done():
				case <-time.After(c.Life):
					_ = e.cl.do(ctx, http.MethodDelete, path+"/sessions/"+session, nil) // it expires anyway
				}
			}()
		}(fmt.Sprintf("s%d", i))
	}
	for i, w := range windows {
		w.Sources = map[string]int{}
		for src, n := range scrapes[i+1].delta(scrapes[i]).byLabel("warmpool_routes_total", "source") {
			if n > 0 {
				w.Sources[src] = int(n)
			}
		}
		w.Cold = w.Sources[warmpool.SourceDeployed] + w.Sources[warmpool.SourceFollower]
	}
	_, _ = fmt.Fprintf(c.Log, "rollout %s: before %v, after %v\n", rollout, run.Before.Sources, run.After.Sources) // progress, as above
	return run, nil
}

// warm waits until the scope at path has n idle pods.
func (e *env) warm(ctx context.Context, path string, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var pool struct {
			Pods []struct {
				State string `json:"state"`
			} `json:"pods"`
		}
		if err := e.cl.get(ctx, path+"/pool", &pool); err != nil {
			return err
		}
		idle := 0
		for _, p := range pool.Pods {
			if p.State == "idle" {
				idle++
			}
		}
		if idle >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d idle pods not there in a minute", path, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WriteText writes the runs as a table, a line per window.
func (r *RolloutResults) WriteText(out io.Writer) error {
	_, err := fmt.Fprintf(out, "deploy delay %.0f ms, %.0f new sessions/s of %.0f ms, min_idle_pods %d; %s\n",
		r.DelayMs, r.Rate, r.LifeMs, r.MinIdle, r.Machine)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "%-8s %-7s %7s %7s %7s %7s %8s  %s\n", "rollout", "window", "routes", "cold", "slow", "failed", "max ms", "sources"); err != nil {
		return err
	}
	for _, run := range r.Runs {
		for _, w := range []struct {
			name string
			w    *RolloutWindow
		}{{"warmup", run.Warmup}, {"before", run.Before}, {"after", run.After}} {
			_, err := fmt.Fprintf(out, "%-8s %-7s %7d %7d %7d %7d %8.0f  %v\n", run.Rollout, w.name, w.w.Routes, w.w.Cold, w.w.Slow, w.w.Failed, w.w.MaxMs, w.w.Sources)
			if err != nil {
				return err
			}
		}
	}
	return nil
}
