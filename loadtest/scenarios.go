package loadtest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
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

// WarmResult is what the warm scenario adds.
type WarmResult struct {
	Mode       string  `json:"mode"`
	Sessions   int     `json:"sessions"`
	Workers    int     `json:"workers"`
	Touches    int     `json:"touches"`
	TargetRate float64 `json:"target_rate"`
	// WarmPods is how many idle pods the scope was given before the measurement;
	// WarmupSeconds how long they took.
	WarmPods      int     `json:"warm_pods"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	// Cycles counts completed route → … → end cycles (cycle mode).
	Cycles int `json:"cycles"`
	// PodsBefore and PodsAfter are the scope's pods around the measurement;
	// DeploysDuring counts pods that appeared during it (0 when routing stayed warm).
	PodsBefore    int `json:"pods_before"`
	PodsAfter     int `json:"pods_after"`
	DeploysDuring int `json:"deploys_during"`
}

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

// QueuedResult is what the queued scenario adds.
type QueuedResult struct {
	Capacity       int     `json:"capacity"`
	PodConcurrency int     `json:"pod_concurrency"`
	MaxPods        int     `json:"max_pods"`
	QueueSize      int     `json:"queue_size"`
	WaitTimeoutS   int     `json:"wait_timeout_s"`
	Clients        int     `json:"clients"`
	HoldMs         float64 `json:"hold_ms"`
	WarmupSeconds  float64 `json:"warmup_seconds"`
	// Served, QueueFull, WaitTimeout and Failed count the routes by outcome.
	Served      int `json:"served"`
	QueueFull   int `json:"queue_full"`
	WaitTimeout int `json:"wait_timeout"`
	Failed      int `json:"failed"`
	// QueueWait is the latency of served routes: the wait in the queue plus one route.
	QueueWait Latency `json:"queue_wait"`
	// ServedPerSec is served routes per second; CapacityPerSec is the most the scope
	// can serve: capacity / hold.
	ServedPerSec   float64 `json:"served_per_sec"`
	CapacityPerSec float64 `json:"capacity_per_sec"`
	// The most seen by pool samples (every 100 ms) during the run.
	MaxWaiters  int `json:"max_waiters"`
	MaxPodsSeen int `json:"max_pods_seen"`
	MaxSessions int `json:"max_sessions"`
	Samples     int `json:"samples"`
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

// slot is one session slot of the warm scenario.
type slot struct {
	id, cycle, touches int
	session            string
	bound              bool
}

func (s *slot) next() { s.cycle++; s.session = fmt.Sprintf("w%d-%d", s.id, s.cycle) }

func (e *engine) warm(ctx context.Context) (*ScenarioResult, error) {
	c := e.cfg
	scope := e.scopeName(ScenarioWarm)
	pc := c.PodConcurrency
	mc := max(c.MaxConcurrency, c.Sessions)
	warmPods := ceilDiv(c.Sessions, pc)
	if c.WarmMode == WarmRoute {
		warmPods = ceilDiv(mc, pc)
	}
	ttl := int((c.WarmupTimeout+c.Duration+2*c.Timeout+cleanupTimeout)/time.Second) + 60
	pool := warmpool.PoolConfig{MaxConcurrency: mc, PodConcurrency: pc, PodTTLS: ttl, SessionTTLS: ttl}
	sr := &ScenarioResult{Name: ScenarioWarm, Scopes: []string{scope}, Pool: pool}
	workers := c.Workers
	if c.WarmMode != WarmRoute {
		workers = min(workers, c.Sessions)
	}
	wr := &WarmResult{Mode: c.WarmMode, Sessions: c.Sessions, Workers: workers, Touches: c.Touches,
		TargetRate: c.Rate, WarmPods: warmPods}
	sr.Warm = wr
	took, err := e.makeWarm(ctx, scope, pool, warmPods)
	wr.WarmupSeconds = took.Seconds()
	if err != nil {
		return nil, err
	}
	before, err := e.pool(ctx, scope)
	if err != nil {
		return nil, err
	}
	wr.PodsBefore = len(before.Pods)

	e.openConns(ctx, workers)
	rec := newRecorder(ScenarioWarm)
	slots := make(chan *slot, c.Sessions)
	for i := range c.Sessions {
		s := &slot{id: i, cycle: -1}
		s.next()
		slots <- s
	}
	routedIDs := make([][]string, workers) // route mode: each worker's sessions
	var cyclesMu sync.Mutex
	e.measure(ctx, rec, workers, c.Rate, func(m context.Context, w int) bool {
		if c.WarmMode == WarmRoute {
			id := fmt.Sprintf("r%d-%d", w, len(routedIDs[w]))
			if a := e.call(ctx, rec, KindRoute, http.MethodPost, sessionsPath(scope), routeBody{id}); a.ok() {
				routedIDs[w] = append(routedIDs[w], id)
			}
			return true
		}
		var s *slot
		select {
		case s = <-slots:
		case <-m.Done():
			return false
		}
		defer func() { slots <- s }()
		switch {
		case !s.bound:
			if a := e.call(ctx, rec, KindRoute, http.MethodPost, sessionsPath(scope), routeBody{s.session}); a.ok() {
				s.bound, s.touches = true, 0
			}
		case c.WarmMode == WarmHold || s.touches < c.Touches:
			e.call(ctx, rec, KindTouch, http.MethodPost, sessionPath(scope, s.session)+"/touch", nil)
			s.touches++
		default:
			e.call(ctx, rec, KindEnd, http.MethodDelete, sessionPath(scope, s.session), nil)
			s.bound = false
			s.next()
			cyclesMu.Lock()
			wr.Cycles++
			cyclesMu.Unlock()
		}
		return true
	})
	finish(sr, rec)

	if after, err := e.pool(ctx, scope); err == nil {
		wr.PodsAfter = len(after.Pods)
		was := before.ids()
		for id := range after.ids() {
			if !was[id] {
				wr.DeploysDuring++
			}
		}
	}
	// Cleanup: end every session still bound (not recorded).
	var left []string
	for range c.Sessions {
		if s := <-slots; s.bound {
			left = append(left, s.session)
		}
	}
	for _, ids := range routedIDs {
		left = append(left, ids...)
	}
	e.endAll(ctx, scope, left, workers)

	if sr.Errors > 0 {
		var parts []string
		for _, cs := range sr.Calls {
			if cs.OK < cs.Count {
				parts = append(parts, cs.Kind+": "+outcomesText(cs.Outcomes))
			}
		}
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d calls not answered 2xx on a warm scope (%s)", sr.Errors, strings.Join(parts, "; ")))
	}
	if wr.DeploysDuring > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d pods were deployed during the measurement: not every route was warm", wr.DeploysDuring))
	}
	if c.Rate > 0 && sr.RPS < 0.9*c.Rate {
		sr.Notes = append(sr.Notes, fmt.Sprintf("target rate %.0f/s not reached: %.0f/s (more --workers or --sessions?)", c.Rate, sr.RPS))
	}
	return sr, nil
}

// endAll ends sessions with n concurrent calls, bounded by cleanupTimeout; nothing is
// recorded.
func (e *engine) endAll(ctx context.Context, scope string, sessions []string, n int) {
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	ch := make(chan string)
	var wg sync.WaitGroup
	for range max(1, min(n, len(sessions))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ch {
				e.cl.do(ctx, http.MethodDelete, sessionPath(scope, id), nil)
			}
		}()
	}
	for _, id := range sessions {
		select {
		case ch <- id:
		case <-ctx.Done():
		}
	}
	close(ch)
	wg.Wait()
}

// --- cold -------------------------------------------------------------------

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

func (e *engine) queued(ctx context.Context) (*ScenarioResult, error) {
	c := e.cfg
	scope := e.scopeName(ScenarioQueued)
	cc, pc := c.MaxConcurrency, c.PodConcurrency
	maxPods := ceilDiv(cc, pc)
	ttl := int((c.WarmupTimeout+c.Duration+2*c.Timeout+cleanupTimeout)/time.Second) + 60
	pool := warmpool.PoolConfig{MaxConcurrency: cc, PodConcurrency: pc, PodTTLS: ttl, SessionTTLS: ttl,
		QueueSize: c.QueueSize, WaitTimeoutS: waitTimeoutS(c.WaitTimeout)}
	sr := &ScenarioResult{Name: ScenarioQueued, Scopes: []string{scope}, Pool: pool}
	qr := &QueuedResult{Capacity: cc, PodConcurrency: pc, MaxPods: maxPods, QueueSize: c.QueueSize,
		WaitTimeoutS: pool.WaitTimeoutS, Clients: c.QueuedClients, HoldMs: ms(c.Hold)}
	sr.Queued = qr
	took, err := e.makeWarm(ctx, scope, pool, maxPods)
	qr.WarmupSeconds = took.Seconds()
	if err != nil {
		return nil, err
	}

	// Pool samples while the load runs.
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampled sync.WaitGroup
	sampled.Add(1)
	go func() {
		defer sampled.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			if p, err := e.pool(sampleCtx, scope); err == nil {
				qr.Samples++
				qr.MaxWaiters = max(qr.MaxWaiters, p.Waiters)
				qr.MaxPodsSeen = max(qr.MaxPodsSeen, len(p.Pods)+p.Placeholders)
				qr.MaxSessions = max(qr.MaxSessions, p.sessions())
			}
			select {
			case <-sampleCtx.Done():
				return
			case <-t.C:
			}
		}
	}()

	e.openConns(ctx, c.QueuedClients)
	rec := newRecorder(ScenarioQueued)
	counts := make([]int, c.QueuedClients)
	e.measure(ctx, rec, c.QueuedClients, 0, func(m context.Context, w int) bool {
		id := fmt.Sprintf("q%d-%d", w, counts[w])
		counts[w]++
		a := e.call(ctx, rec, KindRoute, http.MethodPost, sessionsPath(scope), routeBody{id})
		hold := time.NewTimer(c.Hold)
		select {
		case <-hold.C:
		case <-m.Done():
			hold.Stop()
		}
		if a.ok() {
			e.call(ctx, rec, KindEnd, http.MethodDelete, sessionPath(scope, id), nil)
		}
		return true
	})
	stopSampling()
	sampled.Wait()
	finish(sr, rec)

	if r := sr.Call(KindRoute); r != nil {
		qr.Served = r.OK
		qr.QueueFull = r.Codes["QUEUE_FULL"]
		qr.WaitTimeout = r.Codes["WAIT_TIMEOUT"]
		qr.Failed = r.Count - r.OK - qr.QueueFull - qr.WaitTimeout
		qr.QueueWait = r.OKLatency
		if sr.Seconds > 0 {
			qr.ServedPerSec = math.Round(float64(r.OK)/sr.Seconds*10) / 10
		}
	}
	if c.Hold > 0 {
		qr.CapacityPerSec = math.Round(float64(cc)/c.Hold.Seconds()*10) / 10
	}
	if qr.MaxPodsSeen > maxPods {
		sr.Notes = append(sr.Notes, fmt.Sprintf("pods + placeholders reached %d > max_pods %d", qr.MaxPodsSeen, maxPods))
	}
	if qr.MaxSessions > cc {
		sr.Notes = append(sr.Notes, fmt.Sprintf("sessions reached %d > max_concurrency %d", qr.MaxSessions, cc))
	}
	if qr.Failed > 0 {
		sr.Notes = append(sr.Notes, fmt.Sprintf("%d routes failed other than QUEUE_FULL / WAIT_TIMEOUT", qr.Failed))
	}
	return sr, nil
}
