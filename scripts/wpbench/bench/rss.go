package bench

import (
	"context"
	"time"
)

// RSSRun is the replica's RSS and Redis's memory as sessions are bound.
type RSSRun struct {
	Scopes int         `json:"scopes"`
	Steps  []RSSSample `json:"steps"`
	// HoldMaxRSS is the largest RSS sampled while the sessions were held afterwards.
	HoldMaxRSS int64 `json:"hold_max_rss_bytes"`
	// BytesPerSession is Redis used_memory per bound session, from the first to the
	// last step.
	BytesPerSession float64 `json:"bytes_per_session"`
	Hold            *Phase  `json:"hold"`
}

// RSSSample is one step of an RSS run.
type RSSSample struct {
	Sessions int   `json:"sessions"`
	RSS      int64 `json:"rss_bytes"`
	// Anon and File split RSS: anonymous memory (the Go heap, stacks and runtime)
	// and pages of mapped files (the binary's code and read-only data, faulted in
	// as code paths first run).
	Anon       int64 `json:"rss_anon_bytes"`
	File       int64 `json:"rss_file_bytes"`
	UsedMemory int64 `json:"used_memory_bytes"`
}

// rssRun binds RSSSessions sessions on rssScopes scopes of one pod each, in ten steps,
// sampling the replica's RSS and Redis's memory, then holds them for RSSHold while
// full passes run every 5 s (each reading every scope).
func (c *ScaleConfig) rssRun(ctx context.Context) (*RSSRun, error) {
	c.logf("RSS run: %d sessions on %d scopes (--reconcile-interval 5s)", c.RSSSessions, rssScopes)
	e, err := c.start(ctx, "rss", "--reconcile-interval", "5s")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	per := max(1, c.RSSSessions/rssScopes)
	p := Population{Prefix: "rss-", Scopes: rssScopes, Pods: 1, Sessions: per}
	if err := e.cl.putConfigs(ctx, p, c.Workers); err != nil {
		return nil, err
	}
	r := &RSSRun{Scopes: rssScopes}
	step := func(n int) error {
		st := RSSSample{Sessions: n * rssScopes}
		if err := procStatus(e.replica.PID, map[string]*int64{"VmRSS": &st.RSS, "RssAnon": &st.Anon, "RssFile": &st.File}); err != nil {
			return err
		}
		m, err := readRedis(ctx, e.redis.rdb)
		if err != nil {
			return err
		}
		st.UsedMemory = m.UsedMemory
		r.Steps = append(r.Steps, st)
		return nil
	}
	if err := step(0); err != nil {
		return nil, err
	}
	// The first session of each scope deploys its pod; the memory per session is
	// counted from there.
	bound := 0
	for _, to := range append([]int{1}, steps(per, 10)...) {
		err := parallel(ctx, rssScopes, rssScopes, func(ctx context.Context, i int) error {
			for j := bound; j < to; j++ {
				if err := e.cl.route(ctx, p.scope(i), p.session(j)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		bound = to
		if err := step(to); err != nil {
			return nil, err
		}
	}
	first, last := r.Steps[1], r.Steps[len(r.Steps)-1]
	if n := last.Sessions - first.Sessions; n > 0 {
		r.BytesPerSession = float64(last.UsedMemory-first.UsedMemory) / float64(n)
	}
	c.logf("  bound; holding them for %v", c.RSSHold)
	peak := samplePeakRSS(200*time.Millisecond, e.replica.PID)
	r.Hold, err = e.measure(ctx, "hold", c.RSSHold, nil)
	r.HoldMaxRSS = peak()[0]
	return r, err
}

// samplePeakRSS samples the RSS of each process of pids every period until the
// function it returns is called, which returns the largest RSS each had.
func samplePeakRSS(period time.Duration, pids ...int) func() []int64 {
	stop := make(chan struct{})
	peaks := make(chan []int64)
	go func() {
		m := make([]int64, len(pids))
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			for i, pid := range pids {
				if v, err := procRSS(pid); err == nil {
					m[i] = max(m[i], v)
				}
			}
			select {
			case <-stop:
				peaks <- m
				return
			case <-t.C:
			}
		}
	}()
	return func() []int64 {
		close(stop)
		return <-peaks
	}
}

// steps splits [1, n] into k even steps, ending at n.
func steps(n, k int) []int {
	var out []int
	for i := 1; i <= k; i++ {
		if v := n * i / k; v > 1 && (len(out) == 0 || v > out[len(out)-1]) {
			out = append(out, v)
		}
	}
	return out
}
