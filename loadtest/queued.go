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
