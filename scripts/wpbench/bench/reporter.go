package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/redisstore"
)

// reportingPod is one pod as its agent reports: its body and token, made once.
type reportingPod struct {
	body  []byte
	token string
}

// readPods reads the pods of p's scopes and the sessions bound to each from Redis, 500
// scopes a pipeline, and makes each pod's report body and token (key).
func readPods(ctx context.Context, rdb *redis.Client, p Population, key *httpx.ReportKey) ([]reportingPod, error) {
	keys := redisstore.NewKeyspace("")
	var out []reportingPod
	const batch = 500
	for from := 0; from < p.Scopes; from += batch {
		to := min(from+batch, p.Scopes)
		pipe := rdb.Pipeline()
		pods := make([]*redis.StringSliceCmd, 0, to-from)
		sessions := make([]*redis.MapStringStringCmd, 0, to-from)
		for i := from; i < to; i++ {
			k := keys.Scope(p.scope(i))
			pods = append(pods, pipe.ZRange(ctx, k.Pods, 0, -1))
			sessions = append(sessions, pipe.HGetAll(ctx, k.Sessions))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("read pods: %w", err)
		}
		for j := range pods {
			scope := p.scope(from + j)
			bound := map[string][]string{}
			for sid, pod := range sessions[j].Val() {
				bound[pod] = append(bound[pod], sid)
			}
			for _, pod := range pods[j].Val() {
				s := bound[pod]
				slices.Sort(s)
				if s == nil {
					s = []string{}
				}
				b, err := json.Marshal(map[string]any{"pod_id": pod, "scope_id": scope, "sessions": s, "state": warmpool.AgentReady})
				if err != nil {
					return nil, err
				}
				out = append(out, reportingPod{body: b, token: key.Token(scope, pod)})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no pods in Redis for %d scopes %s*", p.Scopes, p.Prefix)
	}
	return out, nil
}

// ReportStats are the reports sent in a window.
type ReportStats struct {
	// OK counts the reports answered 200, Errors the others and the failed calls.
	OK         int     `json:"ok"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
}

func (s ReportStats) oneLine() string {
	line := fmt.Sprintf("%d reports (%d errors) p50 %.2fms p99 %.2fms", s.OK, s.Errors, s.P50Ms, s.P99Ms)
	if s.FirstError != "" {
		line += "; first error: " + s.FirstError
	}
	return line
}

// reporter sends every pod's report once per interval, the pods' turns spread evenly
// over it, on workers concurrent calls, until stopped; take returns what was sent since
// the last take.
type reporter struct {
	url      string
	hc       *http.Client
	pods     []reportingPod
	interval time.Duration
	workers  int

	mu    sync.Mutex
	stats ReportStats
	lat   []time.Duration
}

func newReporter(base string, pods []reportingPod, interval time.Duration, workers int) *reporter {
	tr := &http.Transport{MaxIdleConns: workers, MaxIdleConnsPerHost: workers, DisableCompression: true}
	return &reporter{url: base + "/v1/agents/report", hc: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		pods: pods, interval: interval, workers: workers}
}

// start starts the reports; the function it returns stops them and waits for the calls
// in flight (once; later calls do nothing).
func (r *reporter) start(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	turns := make(chan int, r.workers)
	var wg sync.WaitGroup
	for range r.workers {
		wg.Go(func() {
			for i := range turns {
				r.send(ctx, r.pods[i])
			}
		})
	}
	wg.Go(func() {
		defer close(turns)
		gap := r.interval / time.Duration(len(r.pods))
		t0 := time.Now()
		for n := 0; ; n++ {
			// Sleep only when more than a millisecond ahead: the turns due within it
			// go out together.
			if d := time.Until(t0.Add(time.Duration(n) * gap)); d > time.Millisecond {
				if wait(ctx, d) != nil {
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case turns <- n % len(r.pods):
			}
		}
	})
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			wg.Wait()
		})
	}
}

func (r *reporter) send(ctx context.Context, p reportingPod) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(p.body))
	if err != nil {
		r.done(0, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+p.token)
	t0 := time.Now()
	resp, err := r.hc.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			r.done(0, err)
		}
		return
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		r.done(0, fmt.Errorf("%d %s", resp.StatusCode, bytes.TrimSpace(msg)))
		return
	}
	r.done(time.Since(t0), nil)
}

func (r *reporter) done(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.stats.Errors++
		if r.stats.FirstError == "" {
			r.stats.FirstError = err.Error()
		}
		return
	}
	r.stats.OK++
	r.lat = append(r.lat, d)
}

// take returns the reports sent since the last take, with their latency quantiles.
func (r *reporter) take() ReportStats {
	r.mu.Lock()
	st, lat := r.stats, r.lat
	r.stats, r.lat = ReportStats{}, nil
	r.mu.Unlock()
	slices.Sort(lat)
	if len(lat) > 0 {
		q := func(f float64) float64 {
			return float64(lat[min(len(lat)-1, int(f*float64(len(lat))))]) / float64(time.Millisecond)
		}
		st.P50Ms, st.P99Ms = q(0.50), q(0.99)
	}
	return st
}
