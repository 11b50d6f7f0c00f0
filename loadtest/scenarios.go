package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sync"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"

	"github.com/warmpool/warmpool"
)

// cleanupTimeout bounds the ending of a scenario's leftover sessions.
const cleanupTimeout = 2 * time.Minute

// engine runs the scenarios of one Config against one server.
type engine struct {
	cfg      Config
	progress io.Writer
	cl       *client
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (e *engine) scopeName(scenario string) string {
	return e.cfg.ScopePrefix + scenario + "-" + warmpool.NewID()[:6]
}

func sessionsPath(scope string) string { return "/v1/scopes/" + scope + "/sessions" }

func sessionPath(scope, session string) string {
	return "/v1/scopes/" + scope + "/sessions/" + url.PathEscape(session)
}

// ping checks that the server answers before anything is created.
func (e *engine) ping(ctx context.Context) error {
	a := e.cl.do(ctx, http.MethodGet, "/healthz", nil)
	if !a.ok() {
		return fmt.Errorf("server %s: GET /healthz: %w", e.cfg.Server, a.asError())
	}
	return nil
}

// putScope stores a scope config with pool; the deploy fields keep their defaults.
func (e *engine) putScope(ctx context.Context, scope string, pool warmpool.PoolConfig) error {
	cfg := warmpool.DefaultScopeConfig()
	// The scenarios hold no pod through acquire and set no probe period: those stay
	// the scope defaults.
	pool.HoldTTLS, pool.ProbePeriodS = cfg.Pool.HoldTTLS, cfg.Pool.ProbePeriodS
	cfg.Pool = pool
	a := e.cl.do(ctx, http.MethodPut, "/v1/scopes/"+scope+"/config", cfg)
	if !a.ok() {
		err := a.asError()
		if a.code == "UNAUTHORIZED" {
			err = fmt.Errorf("%w (pass the server's --auth-token with --token)", err)
		}
		return fmt.Errorf("PUT scope %s config: %w", scope, err)
	}
	return nil
}

// poolView is the part of GET /pool the load tester reads.
type poolView struct {
	DeployVer string `json:"deploy_ver"`
	MaxPods   int    `json:"max_pods"`
	Pods      []struct {
		PodID     string `json:"pod_id"`
		State     string `json:"state"`
		Sessions  int    `json:"sessions"`
		DeployVer string `json:"deploy_ver"`
	} `json:"pods"`
	Placeholders int `json:"placeholders"`
	Followers    int `json:"followers"`
	Waiters      int `json:"waiters"`
}

func (p poolView) idle() int {
	n := 0
	for _, pod := range p.Pods {
		if pod.State == "idle" && pod.DeployVer == p.DeployVer {
			n++
		}
	}
	return n
}

func (p poolView) sessions() int {
	n := 0
	for _, pod := range p.Pods {
		n += pod.Sessions
	}
	return n
}

func (p poolView) ids() map[string]bool {
	m := make(map[string]bool, len(p.Pods))
	for _, pod := range p.Pods {
		m[pod.PodID] = true
	}
	return m
}

func (e *engine) pool(ctx context.Context, scope string) (poolView, error) {
	var p poolView
	err := e.cl.do(ctx, http.MethodGet, "/v1/scopes/"+scope+"/pool", nil).decode(&p)
	return p, err
}

// waitWarm waits (bounded by WarmupTimeout) until the scope has want idle pods of its
// current deploy_ver: the server's autoscale job deploys them for min_idle_pods.
func (e *engine) waitWarm(ctx context.Context, scope string, want int) (time.Duration, error) {
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.WarmupTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := -1
	for {
		p, err := e.pool(ctx, scope)
		if err == nil {
			if last = p.idle(); last >= want {
				return time.Since(t0), nil
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("%d of %d pods idle", last, want)
			}
			return time.Since(t0), fmt.Errorf("warm-up of %s: no %d warm pods after %v (%v); the server's autoscale job deploys them every --sweep-interval",
				scope, want, e.cfg.WarmupTimeout, err)
		case <-tick.C:
		}
	}
}

// makeWarm stores the scope with min_idle_pods = warm, waits for the pods, then sets
// min_idle_pods back to 0 (a pool-only change: no pod is touched) so autoscale
// deploys nothing more while the load runs.
func (e *engine) makeWarm(ctx context.Context, scope string, pool warmpool.PoolConfig, warm int) (time.Duration, error) {
	pool.MinIdlePods = warm
	if err := e.putScope(ctx, scope, pool); err != nil {
		return 0, err
	}
	took, err := e.waitWarm(ctx, scope, warm)
	if err != nil {
		return took, err
	}
	pool.MinIdlePods = 0
	return took, e.putScope(ctx, scope, pool)
}

// call makes one recorded call. Calls run on the run's context, not the
// measurement's, so the end of a measurement never cuts a call short.
func (e *engine) call(ctx context.Context, rec *recorder, kind, method, path string, body any) answer {
	c := rec.begin()
	a := e.cl.do(ctx, method, path, body)
	rec.end(c, kind, a)
	return a
}

type routeBody struct {
	SessionID string `json:"session_id"`
}

// routed is the part of a route answer the load tester reads.
type routed struct {
	PodID string `json:"pod_id"`
	New   bool   `json:"new"`
}

// pace returns a channel that yields one tick per call at rate calls per second
// (vegeta's constant pacer), closed when ctx ends; nil when rate is 0 (flat out).
func pace(ctx context.Context, rate float64) <-chan struct{} {
	if rate <= 0 {
		return nil
	}
	p := vegeta.ConstantPacer{Freq: int(math.Round(rate * 1000)), Per: 1000 * time.Second}
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		began := time.Now()
		var hits uint64
		for {
			wait, stop := p.Pace(time.Since(began), hits)
			if stop {
				return
			}
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			select {
			case ch <- struct{}{}:
				hits++
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// measure runs fn in each of n workers until the measurement (Duration) ends, with a
// progress line meanwhile. With rate > 0 every call of fn waits for a tick of the
// pacer first. fn returns false to stop its worker early.
func (e *engine) measure(ctx context.Context, rec *recorder, n int, rate float64, fn func(m context.Context, w int) bool) {
	m, cancel := context.WithTimeout(ctx, e.cfg.Duration)
	defer cancel()
	ticks := pace(m, rate)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); rec.progress(e.progress, e.cfg.ProgressEvery, stop) }()
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m.Err() == nil {
				if ticks != nil {
					select {
					case _, ok := <-ticks:
						if !ok {
							return
						}
					case <-m.Done():
						return
					}
				}
				if !fn(m, w) {
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-done
}

// finish fills the common part of a scenario result from its recorder.
func finish(sr *ScenarioResult, rec *recorder) {
	span := rec.span()
	sr.Started = rec.start.UTC()
	sr.Seconds = span.Seconds()
	sr.Calls = rec.stats(span)
	for _, c := range sr.Calls {
		sr.Requests += c.Count
		sr.Errors += c.Count - c.OK
	}
	if span > 0 {
		sr.RPS = float64(sr.Requests) / span.Seconds()
	}
	sr.Timeline = rec.timelineCopy()
	var buf bytes.Buffer
	if err := rec.plotHTML(&buf); err != nil {
		sr.Notes = append(sr.Notes, "time-series plot: "+err.Error())
	} else {
		sr.plotHTML = buf.Bytes()
	}
}

// --- warm -------------------------------------------------------------------
