package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
)

// Defaults of PoolTraceConfig.
const (
	DefaultTraceLength   = 3 * time.Minute
	DefaultTraceDeploy   = 2 * time.Second
	DefaultTraceHold     = 15 * time.Second
	DefaultTracePodTTL   = 10
	DefaultTraceMaxPods  = 100
	DefaultTracePeakRate = 3.0
	DefaultTraceSeeds    = 3
)

// DefaultTraceStatics and DefaultTraceDemands are the min_idle_pods of the static and
// the demand policies measured.
var (
	DefaultTraceStatics = []int{0, 1, 2, 4, 8}
	DefaultTraceDemands = []int{0, 1}
)

// PoolTraceConfig is a run of the warm-pool traces (make pooltrace): every trace
// against every policy at once, each pair its own scope of one replica with the fake
// driver, deploys taking Deploy.
type PoolTraceConfig struct {
	Bin, RedisScript, Dir string
	Length, Deploy, Hold  time.Duration
	PodTTLS, MaxPods      int
	PeakRate              float64
	// Statics and Demands are the min_idle_pods of the static and the demand
	// policies measured.
	Statics, Demands []int
	Seed             uint64
	// Seeds is how many arrival sequences each trace is replayed with (each its own
	// scopes, all at once); a policy's figures are summed over them.
	Seeds int
	Log   io.Writer
}

// TraceResult is one trace under one policy.
type TraceResult struct {
	Trace  string `json:"trace"`
	Policy string `json:"policy"`
	// MinIdle is the policy's min_idle_pods.
	MinIdle  int `json:"min_idle_pods"`
	Routes   int `json:"routes"`
	Cold     int `json:"cold"`
	Failed   int `json:"failed"`
	Sessions int `json:"sessions"`
	// IdlePodS is the idle pod-seconds (sampled every second); MeanIdle and
	// MeanTarget are the mean idle pods and target_idle over the trace.
	IdlePodS   float64 `json:"idle_pod_s"`
	MeanIdle   float64 `json:"mean_idle"`
	MaxIdle    int     `json:"max_idle"`
	MeanTarget float64 `json:"mean_target"`
	MaxTarget  int     `json:"max_target"`
	// Settled are the mean target_idle and idle pods after the first two mean
	// session lengths (before them, no session has ended yet: a start from an empty
	// pool is a ramp), and the share of those seconds the target was at most
	// min_idle_pods + 1.
	SettledTarget, SettledIdle, SettledWithin float64
	// Series is the per-second samples: arrivals in the second, idle pods, target.
	Series []Sample `json:"series"`
}

// Sample is one second of a trace: the arrivals and the cold routes answered in it,
// then the idle pods and the target at its end.
type Sample struct {
	Arrivals, Cold, Idle, Target int
}

// WarmShare is the share of the trace's routes served by a warm pod.
func (r TraceResult) WarmShare() float64 {
	if r.Routes == 0 {
		return 1
	}
	return 1 - float64(r.Cold)/float64(r.Routes)
}

// IdlePerSession is the idle pod-seconds spent per served session.
func (r TraceResult) IdlePerSession() float64 {
	return r.IdlePodS / math.Max(1, float64(r.Sessions))
}

// PoolTraceResults are the results of a run.
type PoolTraceResults struct {
	Config  PoolTraceConfig `json:"-"`
	Results []TraceResult   `json:"results"`
}

// trace is an arrival rate over the trace (per second, at t of length), and spikes:
// extra arrivals at a time.
type trace struct {
	name   string
	rate   func(t, length time.Duration, peak float64) float64
	spikes func(length time.Duration) map[time.Duration]int
}

var traces = []trace{
	{name: "steady", rate: func(_, _ time.Duration, peak float64) float64 { return peak / 3 }},
	{name: "ramp", rate: func(t, l time.Duration, peak float64) float64 { return 0.1 + (peak-0.1)*t.Seconds()/l.Seconds() }},
	{name: "step", rate: func(t, l time.Duration, peak float64) float64 {
		if t < l/3 {
			return peak / 6
		}
		return peak
	}},
	{name: "diurnal", rate: func(t, l time.Duration, peak float64) float64 {
		return 0.1 + (peak-0.1)*(1-math.Cos(2*math.Pi*t.Seconds()/l.Seconds()))/2
	}},
	{name: "bursty", rate: func(_, _ time.Duration, peak float64) float64 { return peak / 6 },
		spikes: func(l time.Duration) map[time.Duration]int {
			s := map[time.Duration]int{}
			for t := 20 * time.Second; t < l; t += 40 * time.Second {
				s[t] = 8
			}
			return s
		}},
}

// policy is one warm policy measured.
type policy struct {
	name    string
	minIdle int
}

func (c PoolTraceConfig) policies() []policy {
	var ps []policy
	for _, n := range c.Statics {
		ps = append(ps, policy{warmpool.WarmStatic, n})
	}
	for _, n := range c.Demands {
		ps = append(ps, policy{warmpool.WarmDemand, n})
	}
	return ps
}

// scopeConfig is the config of a trace's scope under p: one session a pod, no queue.
func (c PoolTraceConfig) scopeConfig(p policy) warmpool.ScopeConfig {
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.PodConcurrency, cfg.Pool.MaxConcurrency = 1, c.MaxPods
	cfg.Pool.MinIdlePods, cfg.Pool.WarmPolicy = p.minIdle, p.name
	cfg.Pool.PodTTLS, cfg.Pool.SessionTTLS = c.PodTTLS, 3600
	cfg.Pool.QueueSize, cfg.Pool.WaitTimeoutS = 0, 0
	return cfg
}

// PoolTrace replays every trace against every policy at once on one replica.
func PoolTrace(ctx context.Context, c PoolTraceConfig) (*PoolTraceResults, error) {
	dir := filepath.Join(c.Dir, "pooltrace")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r, err := startRedis(ctx, c.RedisScript, filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	defer r.stop()
	p, err := startReplica(ctx, c.Bin, dir, "replica", r, "--fake-deploy-delay", c.Deploy.String())
	if err != nil {
		return nil, err
	}
	defer p.stop()
	cl := newClient(p.URL, 256)
	type run struct {
		trace  trace
		policy policy
		scope  string
		res    TraceResult
		seed   int
		// routes counts the arrivals so far, seen those in the samples before; cold
		// the cold routes so far, coldSeen those in the samples before.
		routes, seen, cold, coldSeen int
	}
	var runs []*run
	for seed := range max(1, c.Seeds) {
		for _, tr := range traces {
			for i, pol := range c.policies() {
				ru := &run{trace: tr, policy: pol, seed: seed, scope: fmt.Sprintf("%s-%d-%d", tr.name, i, seed)}
				ru.res = TraceResult{Trace: tr.name, Policy: pol.name, MinIdle: pol.minIdle}
				if err := cl.do(ctx, http.MethodPut, "/v1/scopes/"+ru.scope+"/config", c.scopeConfig(pol)); err != nil {
					return nil, err
				}
				runs = append(runs, ru)
			}
		}
	}
	// The static pools fill to min_idle_pods before the traces start.
	for _, ru := range runs {
		for {
			idle, _, err := poolIdle(ctx, cl, ru.scope)
			if err != nil {
				return nil, err
			}
			if idle >= ru.policy.minIdle {
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	// Sessions still on at the end of the trace are left, not ended.
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	logf(c.Log, "pooltrace: %d traces × %d policies for %v, deploys of %v", len(traces), len(c.policies()), c.Length, c.Deploy)
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for n, ru := range runs {
		rng := rand.New(rand.NewPCG(c.Seed+uint64(ru.seed), uint64(n/len(c.policies())))) // one arrival sequence per trace and seed
		arrivals := arrivalTimes(ru.trace, c, rng)
		wg.Go(func() {
			for i, at := range arrivals {
				if d := time.Until(start.Add(at.at)); d > 0 {
					select {
					case <-runCtx.Done():
						return
					case <-time.After(d):
					}
				}
				sid := fmt.Sprintf("s%d", i)
				mu.Lock()
				ru.routes++
				mu.Unlock()
				wg.Go(func() {
					t0 := time.Now()
					err := cl.route(runCtx, ru.scope, sid)
					took := time.Since(t0)
					if err != nil && runCtx.Err() != nil {
						return // cut short by the end of the trace
					}
					mu.Lock()
					ru.res.Routes++
					switch {
					case err != nil:
						ru.res.Failed++
					case took >= c.Deploy/2:
						ru.res.Cold++
						ru.cold++
					}
					if err == nil {
						ru.res.Sessions++
					}
					mu.Unlock()
					if err != nil {
						return
					}
					select {
					case <-runCtx.Done():
						return
					case <-time.After(at.hold):
					}
					_ = cl.do(runCtx, http.MethodDelete, "/v1/scopes/"+ru.scope+"/sessions/"+sid, nil)
				})
			}
		})
	}
	samples := 0
	for tick := time.NewTicker(time.Second); time.Since(start) < c.Length; {
		select {
		case <-ctx.Done():
			tick.Stop()
			return nil, ctx.Err()
		case <-tick.C:
		}
		samples++
		for _, ru := range runs {
			idle, target, err := poolIdle(ctx, cl, ru.scope)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			ru.res.Series = append(ru.res.Series, Sample{Arrivals: ru.routes - ru.seen, Cold: ru.cold - ru.coldSeen, Idle: idle, Target: target})
			ru.seen, ru.coldSeen = ru.routes, ru.cold
			ru.res.IdlePodS += float64(idle)
			ru.res.MaxIdle, ru.res.MaxTarget = max(ru.res.MaxIdle, idle), max(ru.res.MaxTarget, target)
			ru.res.MeanTarget += float64(target)
			mu.Unlock()
		}
	}
	stop()
	wg.Wait()
	res := &PoolTraceResults{Config: c}
	for _, ru := range runs {
		ru.res.MeanIdle = ru.res.IdlePodS / float64(max(1, samples))
		ru.res.MeanTarget /= float64(max(1, samples))
		settled := ru.res.Series[min(len(ru.res.Series), int(2*c.Hold/time.Second)):]
		for _, x := range settled {
			ru.res.SettledTarget += float64(x.Target) / float64(len(settled))
			ru.res.SettledIdle += float64(x.Idle) / float64(len(settled))
			if x.Target <= ru.res.MinIdle+1 {
				ru.res.SettledWithin += 1 / float64(len(settled))
			}
		}
		res.Results = append(res.Results, ru.res)
	}
	res.Results = mergeSeeds(res.Results)
	return res, nil
}

// mergeSeeds sums the results of one trace and policy over the seeds (in the order of
// the first seed's): the counts add up, the means are the seeds' mean, the maxima
// the largest; the series is the first seed's.
func mergeSeeds(rs []TraceResult) []TraceResult {
	type key struct {
		trace, policy string
		minIdle       int
	}
	var order []key
	by := map[key][]TraceResult{}
	for _, r := range rs {
		k := key{r.Trace, r.Policy, r.MinIdle}
		if _, ok := by[k]; !ok {
			order = append(order, k)
		}
		by[k] = append(by[k], r)
	}
	out := make([]TraceResult, 0, len(order))
	for _, k := range order {
		m := by[k][0]
		n := float64(len(by[k]))
		m.MeanIdle, m.MeanTarget, m.SettledTarget, m.SettledIdle, m.SettledWithin = m.MeanIdle/n, m.MeanTarget/n, m.SettledTarget/n, m.SettledIdle/n, m.SettledWithin/n
		for _, r := range by[k][1:] {
			m.Routes, m.Cold, m.Failed, m.Sessions, m.IdlePodS = m.Routes+r.Routes, m.Cold+r.Cold, m.Failed+r.Failed, m.Sessions+r.Sessions, m.IdlePodS+r.IdlePodS
			m.MaxIdle, m.MaxTarget = max(m.MaxIdle, r.MaxIdle), max(m.MaxTarget, r.MaxTarget)
			m.MeanIdle, m.MeanTarget = m.MeanIdle+r.MeanIdle/n, m.MeanTarget+r.MeanTarget/n
			m.SettledTarget, m.SettledIdle, m.SettledWithin = m.SettledTarget+r.SettledTarget/n, m.SettledIdle+r.SettledIdle/n, m.SettledWithin+r.SettledWithin/n
		}
		out = append(out, m)
	}
	return out
}

// arrival is one session of a trace: when it arrives and how long it lasts.
type arrival struct {
	at, hold time.Duration
}

// arrivalTimes draws a trace's arrivals: a Poisson process of the trace's rate
// (thinning at the peak rate), its spikes, sessions of exponential length around Hold.
func arrivalTimes(tr trace, c PoolTraceConfig, rng *rand.Rand) []arrival {
	var out []arrival
	hold := func() time.Duration { return time.Duration(rng.ExpFloat64() * float64(c.Hold)) }
	top := c.PeakRate * 1.01
	for t := time.Duration(0); ; {
		t += time.Duration(rng.ExpFloat64() / top * float64(time.Second))
		if t >= c.Length {
			break
		}
		if rng.Float64()*top < tr.rate(t, c.Length, c.PeakRate) {
			out = append(out, arrival{t, hold()})
		}
	}
	if tr.spikes != nil {
		for at, n := range tr.spikes(c.Length) {
			for i := range n {
				out = append(out, arrival{at + time.Duration(i)*100*time.Millisecond, hold()})
			}
		}
	}
	slices.SortFunc(out, func(a, b arrival) int { return int(a.at - b.at) })
	return out
}

// poolIdle reads a scope's idle pods and target_idle.
func poolIdle(ctx context.Context, cl *client, scope string) (int, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cl.base+"/v1/scopes/"+scope+"/pool", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := cl.hc.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	var p struct {
		Pods []struct {
			State string `json:"state"`
		} `json:"pods"`
		TargetIdle int `json:"target_idle"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return 0, 0, fmt.Errorf("GET %s/pool: %w", scope, err)
	}
	idle := 0
	for _, pod := range p.Pods {
		if pod.State == "idle" {
			idle++
		}
	}
	return idle, p.TargetIdle, nil
}

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		_, _ = fmt.Fprintf(w, format+"\n", args...) // progress only
	}
}
