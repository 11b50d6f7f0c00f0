package loadtest

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
)

// ColdResult is what the cold scenario adds.
type ColdResult struct {
	Burst          int     `json:"burst"`
	PodConcurrency int     `json:"pod_concurrency"`
	MaxConcurrency int     `json:"max_concurrency"`
	DeployDelayMs  float64 `json:"deploy_delay_ms,omitempty"`
	// ExpectedDeploys is ceil(min(burst, max_concurrency) / pod_concurrency).
	ExpectedDeploys int           `json:"expected_deploys"`
	Bursts          []BurstResult `json:"bursts"`
	// AllServed: every route of every burst was answered 200; DeploysAsExpected:
	// every burst deployed exactly ExpectedDeploys pods.
	AllServed         bool `json:"all_served"`
	DeploysAsExpected bool `json:"deploys_as_expected"`
	// WallMs summarises the bursts' wall times.
	WallMinMs  float64 `json:"wall_min_ms"`
	WallMeanMs float64 `json:"wall_mean_ms"`
	WallMaxMs  float64 `json:"wall_max_ms"`
}

// BurstResult is one cold burst: N concurrent routes of new sessions on a fresh scope.
type BurstResult struct {
	Scope  string `json:"scope"`
	N      int    `json:"n"`
	Served int    `json:"served"`
	// Outcomes counts the routes by status and error code.
	Outcomes map[string]int `json:"outcomes"`
	// WallMs is from the release of the burst to its last answer.
	WallMs float64 `json:"wall_ms"`
	// WallOverDelay is WallMs over the deploy delay, when that is known.
	WallOverDelay float64 `json:"wall_over_delay,omitempty"`
	// DistinctPods counts the pods the served routes were sent to; PoolPods and
	// Placeholders are the scope's pool right after the burst (a fresh scope: its
	// pods are the burst's deploys).
	DistinctPods int `json:"distinct_pods"`
	PoolPods     int `json:"pool_pods"`
	Placeholders int `json:"placeholders"`
}

func (e *engine) cold(ctx context.Context) (*ScenarioResult, error) {
	c := e.cfg
	pool := warmpool.PoolConfig{MaxConcurrency: c.MaxConcurrency, PodConcurrency: c.PodConcurrency,
		PodTTLS: 60, SessionTTLS: 600}
	sr := &ScenarioResult{Name: ScenarioCold, Pool: pool}
	cr := &ColdResult{Burst: c.Burst, PodConcurrency: c.PodConcurrency, MaxConcurrency: c.MaxConcurrency,
		DeployDelayMs: ms(c.DeployDelay), AllServed: true, DeploysAsExpected: true,
		ExpectedDeploys: ceilDiv(min(c.Burst, c.MaxConcurrency), c.PodConcurrency)}
	sr.Cold = cr
	// Fresh scopes, stored before the clock starts; and connections opened ahead so a
	// burst does not measure TCP handshakes.
	for range c.Bursts {
		scope := e.scopeName(ScenarioCold)
		if err := e.putScope(ctx, scope, pool); err != nil {
			return nil, err
		}
		sr.Scopes = append(sr.Scopes, scope)
	}
	e.openConns(ctx, c.Burst)
	rec := newRecorder(ScenarioCold)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); rec.progress(e.progress, e.cfg.ProgressEvery, stop) }()
	var err error
	for _, scope := range sr.Scopes {
		var br BurstResult
		if br, err = e.burst(ctx, rec, scope, c.Burst); err != nil {
			break
		}
		if c.DeployDelay > 0 {
			br.WallOverDelay = math.Round(br.WallMs/ms(c.DeployDelay)*1000) / 1000
		}
		cr.AllServed = cr.AllServed && br.Served == br.N
		cr.DeploysAsExpected = cr.DeploysAsExpected && br.PoolPods == cr.ExpectedDeploys && br.Placeholders == 0
		cr.Bursts = append(cr.Bursts, br)
	}
	close(stop)
	<-done
	finish(sr, rec)
	for i, b := range cr.Bursts {
		if i == 0 || b.WallMs < cr.WallMinMs {
			cr.WallMinMs = b.WallMs
		}
		cr.WallMaxMs = max(cr.WallMaxMs, b.WallMs)
		cr.WallMeanMs += b.WallMs / float64(len(cr.Bursts))
	}
	cr.WallMeanMs = math.Round(cr.WallMeanMs*1000) / 1000
	if !cr.AllServed {
		sr.Notes = append(sr.Notes, "not every cold route was served")
	}
	if !cr.DeploysAsExpected {
		sr.Notes = append(sr.Notes, fmt.Sprintf("a burst did not deploy exactly ceil(N/pod_concurrency) = %d pods", cr.ExpectedDeploys))
	}
	if c.Burst > c.MaxConcurrency {
		sr.Notes = append(sr.Notes, fmt.Sprintf("burst %d > max_concurrency %d: the rest cannot be served", c.Burst, c.MaxConcurrency))
	}
	return sr, err
}

// openConns opens n keep-alive connections ahead of a measurement, so that it does
// not measure TCP handshakes.
func (e *engine) openConns(ctx context.Context, n int) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			e.cl.do(ctx, http.MethodGet, "/healthz", nil)
		}()
	}
	close(start)
	wg.Wait()
}

// burst releases n concurrent routes of new sessions on scope at once, then reads
// the pool and ends the sessions it got.
func (e *engine) burst(ctx context.Context, rec *recorder, scope string, n int) (BurstResult, error) {
	br := BurstResult{Scope: scope, N: n, Outcomes: map[string]int{}}
	answers := make([]answer, n)
	ends := make([]time.Time, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i] = e.call(ctx, rec, KindRoute, http.MethodPost, sessionsPath(scope), routeBody{fmt.Sprintf("c%d", i)})
			ends[i] = time.Now()
		}()
	}
	t0 := time.Now()
	close(start)
	wg.Wait()
	var last time.Time
	pods := map[string]bool{}
	var served []string
	for i, a := range answers {
		if ends[i].After(last) {
			last = ends[i]
		}
		br.Outcomes[a.outcome()]++
		var r routed
		if a.ok() && a.decode(&r) == nil {
			br.Served++
			pods[r.PodID] = true
			served = append(served, fmt.Sprintf("c%d", i))
		}
	}
	br.WallMs = ms(last.Sub(t0))
	br.DistinctPods = len(pods)
	p, err := e.pool(ctx, scope)
	if err != nil {
		return br, fmt.Errorf("pool of %s: %w", scope, err)
	}
	br.PoolPods, br.Placeholders = len(p.Pods), p.Placeholders
	// End what was served, concurrently: recorded, these are real end calls.
	for _, id := range served {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.call(ctx, rec, KindEnd, http.MethodDelete, sessionPath(scope, id), nil)
		}()
	}
	wg.Wait()
	return br, nil
}

// --- queued -----------------------------------------------------------------
