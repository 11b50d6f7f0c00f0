package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpool/warmpool"
)

// client calls one replica (or the baseline handler) over keep-alive connections,
// with a bearer token when token is set.
type client struct {
	base  string
	hc    *http.Client
	token string
}

// withToken is c sending token as its bearer token, over c's connections.
func (c *client) withToken(token string) *client {
	return &client{base: c.base, hc: c.hc, token: token}
}

// authorize sets the client's bearer token on req.
func (c *client) authorize(req *http.Request) {
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
}

func newClient(base string, conns int) *client {
	tr := &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true}
	return &client{base: base, hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// do sends one JSON call (no body when body is nil: the calls that take none refuse
// null) and fails on any answer but 200.
func (c *client) do(ctx context.Context, method, path string, body any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.answer(req, path, nil)
}

// answer sends req, authorized, and decodes its answer, which must be 200, into out
// (reads it whole when out is nil); an error names the call by its method and path.
func (c *client) answer(req *http.Request, path string, out any) error {
	c.authorize(req)
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return &statusError{status: resp.StatusCode, text: fmt.Sprintf("%s %s: %d %s", req.Method, path, resp.StatusCode, bytes.TrimSpace(msg))}
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body) // the answer was 200: reading the rest only frees the connection
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// statusError is an answer other than 200.
type statusError struct {
	status int
	text   string
}

func (e *statusError) Error() string { return e.text }

// setupRetries is how many times a call of the setup is tried again after a 503, a
// second apart: STORE_UNAVAILABLE when Redis ran late on the loaded machine (the call
// did nothing), NO_POD_AVAILABLE while the scope's deploy of a call that timed out is
// still in flight.
const setupRetries = 30

// setupCall is do for the setup, which must not fail for a Redis that was slow once.
func (c *client) setupCall(ctx context.Context, method, path string, body any) error {
	for attempt := 0; ; attempt++ {
		err := c.do(ctx, method, path, body)
		var se *statusError
		if attempt == setupRetries || !errors.As(err, &se) || se.status != http.StatusServiceUnavailable {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// get sends GET path and decodes its answer, which must be 200, into out.
func (c *client) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	return c.answer(req, path, out)
}

// Population is what a setup creates: Scopes scopes named Prefix + index, each with
// Pods pods holding Sessions sessions named "s" + index between them.
type Population struct {
	Prefix   string
	Scopes   int
	Pods     int
	Sessions int
	// ReportIntervalS is the scopes' agent.report_interval_s (0: the default).
	ReportIntervalS int
}

func (p Population) scope(i int) string   { return fmt.Sprintf("%s%d", p.Prefix, i) }
func (p Population) session(j int) string { return fmt.Sprintf("s%d", j) }

// podConcurrency is the pod_concurrency that packs Sessions sessions on Pods pods.
func (p Population) podConcurrency() int { return max(1, (p.Sessions+p.Pods-1)/p.Pods) }

// config is the scopes' config: max_pods = Pods, nothing expires while measured, no
// warm pool kept, no queue.
func (p Population) config() warmpool.ScopeConfig {
	c := warmpool.DefaultScopeConfig()
	pc := p.podConcurrency()
	c.Pool.PodConcurrency = pc
	c.Pool.MaxConcurrency = pc * p.Pods
	c.Pool.MinIdlePods = 0
	c.Pool.PodTTLS = 86400
	c.Pool.SessionTTLS = 86400
	c.Pool.QueueSize = 0
	c.Pool.WaitTimeoutS = 0
	if p.ReportIntervalS > 0 {
		c.Agent.ReportIntervalS = p.ReportIntervalS
	}
	return c
}

// parallel runs fn(i) for i in [0, n) on workers goroutines; the first error stops it.
func parallel(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

// putConfigs stores every scope's config through the API.
func (c *client) putConfigs(ctx context.Context, p Population, workers int) error {
	cfg := p.config()
	return parallel(ctx, p.Scopes, workers, func(ctx context.Context, i int) error {
		return c.setupCall(ctx, http.MethodPut, "/v1/scopes/"+p.scope(i)+"/config", cfg)
	})
}

// routeAll binds every session of every scope, one scope's sessions in order, so
// that the first fit fills the pods one after the other.
func (c *client) routeAll(ctx context.Context, p Population, workers int) error {
	return parallel(ctx, p.Scopes, workers, func(ctx context.Context, i int) error {
		for j := range p.Sessions {
			if err := c.setupCall(ctx, http.MethodPost, "/v1/scopes/"+p.scope(i)+"/sessions", map[string]string{"session_id": p.session(j)}); err != nil {
				return err
			}
		}
		return nil
	})
}

func (c *client) route(ctx context.Context, scope, session string) error {
	return c.do(ctx, http.MethodPost, "/v1/scopes/"+scope+"/sessions", map[string]string{"session_id": session})
}

// RouteStats is what a run of affinity routes measured.
type RouteStats struct {
	Routes int `json:"routes"`
	Errors int `json:"errors"`
	// FirstError is the first failure, when there was one.
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	// P50Ms and P99Ms are latency quantiles of the routes answered 200.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}

// routeLoad routes bound sessions of p, picked at random, for d: at rate calls per
// second (0 = flat out) with workers concurrent calls. Each is an affinity route:
// the session keeps its pod.
func (c *client) routeLoad(ctx context.Context, p Population, d time.Duration, rate float64, workers int) RouteStats {
	return callLoad(ctx, d, rate, workers, func(ctx context.Context) error {
		return c.route(ctx, p.scope(rand.IntN(p.Scopes)), p.session(rand.IntN(max(p.Sessions, 1))))
	})
}

// touchLoad touches bound sessions of p, picked at random, as routeLoad routes them.
func (c *client) touchLoad(ctx context.Context, p Population, d time.Duration, rate float64, workers int) RouteStats {
	return callLoad(ctx, d, rate, workers, func(ctx context.Context) error {
		return c.do(ctx, http.MethodPost, "/v1/scopes/"+p.scope(rand.IntN(p.Scopes))+"/sessions/"+p.session(rand.IntN(max(p.Sessions, 1)))+"/touch", struct{}{})
	})
}

// callLoad makes calls for d, at rate calls per second (0 = flat out) with workers
// concurrent ones, and measures their latency.
func callLoad(ctx context.Context, d time.Duration, rate float64, workers int, call func(ctx context.Context) error) RouteStats {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ticks <-chan time.Time
	if rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer t.Stop()
		ticks = t.C
	}
	var mu sync.Mutex
	var st RouteStats
	var lat []time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var mine []time.Duration
			errs, first := 0, ""
			for {
				if ticks != nil {
					select {
					case <-ctx.Done():
					case <-ticks:
					}
				}
				if ctx.Err() != nil {
					break
				}
				t0 := time.Now()
				err := call(ctx)
				switch {
				case err == nil:
					mine = append(mine, time.Since(t0))
				case ctx.Err() == nil:
					errs++
					if first == "" {
						first = err.Error()
					}
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			st.Errors += errs
			if st.FirstError == "" {
				st.FirstError = first
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	st.Seconds = time.Since(start).Seconds()
	st.Routes = len(lat)
	st.P50Ms, st.P99Ms, st.MaxMs = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 1)
	return st
}
