package loadtest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/warmpool/warmpool"
)

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
