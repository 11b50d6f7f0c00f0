package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/warmpool/warmpool/redisstore"
)

// BurstRow is one cold burst: Routes new sessions routed at Rate a second into one
// empty scope of pod_concurrency PodConcurrency, each deploy of the fake driver taking
// DeployS; the answers by status, the deploys it took (and the ceil(routes /
// pod_concurrency) it should), the latency of the routes answered 200, and Redis's work.
type BurstRow struct {
	Rate           float64     `json:"rate"`
	PodConcurrency int         `json:"pod_concurrency"`
	Routes         int         `json:"routes"`
	DeployS        float64     `json:"deploy_s"`
	Status         map[int]int `json:"status"`
	Failed         int         `json:"failed"`
	FirstError     string      `json:"first_error,omitempty"`
	Deploys        int         `json:"deploys"`
	WantDeploys    int         `json:"want_deploys"`
	P50Ms          float64     `json:"p50_ms"`
	P99Ms          float64     `json:"p99_ms"`
	MaxMs          float64     `json:"max_ms"`
	Seconds        float64     `json:"seconds"`
	RedisCPUS      float64     `json:"redis_cpu_s"`
	CommandsPerRt  float64     `json:"redis_commands_per_route"`
}

// Server5xx counts the answers 500 and above.
func (b *BurstRow) Server5xx() int {
	n := 0
	for code, c := range b.Status {
		if code >= 500 {
			n += c
		}
	}
	return n
}

// burst routes BurstRoutes new sessions into one empty scope at rate a second, each
// call on its own (open loop: arrivals do not wait for answers).
func (c *BigScopeConfig) burst(ctx context.Context, rate float64, pc int) (*BurstRow, error) {
	sc := c.scale()
	name := fmt.Sprintf("burst-%.0f-%d", rate, pc)
	sc.logf("%s: %d routes at %.0f/s, deploys of %v", name, c.BurstRoutes, rate, c.BurstDeploy)
	e, err := sc.start(ctx, name, "--fake-deploy-delay", c.BurstDeploy.String(), "--reconcile-interval", "1h")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	want := (c.BurstRoutes + pc - 1) / pc
	if err := e.cl.setupCall(ctx, http.MethodPut, "/v1/scopes/"+bigScope+"/config", bigConfig(want, pc)); err != nil {
		return nil, err
	}
	tr := &http.Transport{MaxIdleConns: c.BurstRoutes, MaxIdleConnsPerHost: c.BurstRoutes, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	defer tr.CloseIdleConnections()
	row := &BurstRow{Rate: rate, PodConcurrency: pc, Routes: c.BurstRoutes, DeployS: c.BurstDeploy.Seconds(), Status: map[int]int{}, WantDeploys: want}
	a, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for i := range c.BurstRoutes {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Until(at)):
		}
		wg.Go(func() {
			t := time.Now()
			code, err := routeStatus(ctx, hc, e.replica.URL, bigScope, fmt.Sprintf("b%d", i))
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				row.Failed++
				if row.FirstError == "" {
					row.FirstError = err.Error()
				}
				return
			}
			row.Status[code]++
			if code == http.StatusOK {
				lat = append(lat, d)
			}
		})
	}
	wg.Wait()
	row.Seconds = time.Since(start).Seconds()
	b, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return nil, err
	}
	var cmds int64
	for cmd, v := range b.Calls {
		if cmd != "info" {
			cmds += v - a.Calls[cmd]
		}
	}
	row.RedisCPUS = (b.CPU - a.CPU).Seconds()
	row.CommandsPerRt = float64(cmds) / float64(c.BurstRoutes)
	pods, err := e.redis.rdb.ZCard(ctx, redisstore.NewKeyspace("").Scope(bigScope).Pods).Result()
	if err != nil {
		return nil, err
	}
	row.Deploys = int(pods)
	row.P50Ms, row.P99Ms, row.MaxMs = quantileMs(lat, 0.50), quantileMs(lat, 0.99), quantileMs(lat, 1)
	sc.logf("  %v, %d failed, %d deploys (want %d), p50 %.0f ms p99 %.0f ms max %.0f ms", row.Status, row.Failed, row.Deploys, want, row.P50Ms, row.P99Ms, row.MaxMs)
	return row, nil
}

// routeStatus routes one new session of the scope and returns the answer's status.
func routeStatus(ctx context.Context, hc *http.Client, base, scope, session string) (int, error) {
	b, _ := json.Marshal(map[string]string{"session_id": session})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/scopes/"+scope+"/sessions", bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body) // the status is the answer measured
	resp.Body.Close()
	return resp.StatusCode, nil
}
