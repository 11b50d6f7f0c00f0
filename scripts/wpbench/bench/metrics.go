package bench

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of MetricsConfig.
const (
	DefaultMetricsScopes  = 5_000
	DefaultMetricsScrapes = 10
	// DefaultScrapeGap is longer than a replica shares one rendering of /metrics
	// between scrapes, so that each measured scrape renders it.
	DefaultScrapeGap    = 2 * time.Second
	DefaultMetricsRoute = 10 * time.Second
	DefaultScrapeLoops  = 4
	DefaultRouteRounds  = 3
	DefaultSlowReaders  = 50
	DefaultSlowHold     = 15 * time.Second
	DefaultSlowRecover  = 15 * time.Second
)

// MetricsConfig is one measurement of what /metrics costs a replica (wpbench metrics):
// S scopes of one pod and one session each on a fresh redis-server and replica, then
// the size of a scrape, the replica CPU of one, warm routes flat out with and without
// scrape loops, and the RSS while slow readers ask for /metrics and never read.
type MetricsConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and metrics.json.
	Bin, RedisScript, Dir string
	// Flags are added to `warmpool serve`'s.
	Flags []string
	// Scopes is S; Workers the concurrency of the setup and of the warm routes.
	Scopes, Workers int
	// Scrapes are made one every ScrapeGap, their CPU less that of an idle window of
	// the same length.
	Scrapes   int
	ScrapeGap time.Duration
	// Route is the length of each window of warm routes; Loops the scrape loops
	// (each one scrape after the other, as Prometheus asks: gzip) of every second
	// window; Rounds the pairs of windows, alone and with the loops in turn, so that
	// the machine's load weighs on both alike.
	Route  time.Duration
	Loops  int
	Rounds int
	// Slow connections send GET /metrics and never read, for SlowHold; the RSS is
	// sampled then and for SlowRecover after they are closed.
	Slow                  int
	SlowHold, SlowRecover time.Duration
	// SettleHorizon is that of ScaleConfig; DefaultSettleHorizon when zero.
	SettleHorizon time.Duration
	Log           io.Writer
}

func (c *MetricsConfig) fill() {
	defaults.Positive(&c.Scopes, DefaultMetricsScopes)
	defaults.Positive(&c.Workers, DefaultWorkers)
	defaults.Positive(&c.Scrapes, DefaultMetricsScrapes)
	defaults.Positive(&c.ScrapeGap, DefaultScrapeGap)
	defaults.Positive(&c.Route, DefaultMetricsRoute)
	defaults.Positive(&c.Loops, DefaultScrapeLoops)
	defaults.Positive(&c.Rounds, DefaultRouteRounds)
	defaults.Positive(&c.Slow, DefaultSlowReaders)
	defaults.Positive(&c.SlowHold, DefaultSlowHold)
	defaults.Positive(&c.SlowRecover, DefaultSlowRecover)
	if c.SettleHorizon == 0 {
		c.SettleHorizon = DefaultSettleHorizon
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// MetricsResults is what a /metrics measurement found.
type MetricsResults struct {
	Started time.Time `json:"started"`
	Machine string    `json:"machine"`
	Scopes  int       `json:"scopes"`
	Flags   []string  `json:"flags,omitempty"`
	// Bytes and GzipBytes: one scrape as text and gzipped; Series its sample lines.
	Bytes         int64   `json:"bytes"`
	GzipBytes     int64   `json:"gzip_bytes"`
	Series        int     `json:"series"`
	BytesPerScope float64 `json:"bytes_per_scope"`
	// ScrapeCPUMs and ScrapeRedisMs are the replica's and Redis's CPU per scrape
	// (gzip, as Prometheus asks), the idle window's CPU taken off; ScrapeWallMs the
	// longest scrape.
	ScrapeCPUMs   float64 `json:"scrape_replica_cpu_ms"`
	ScrapeRedisMs float64 `json:"scrape_redis_cpu_ms"`
	ScrapeWallMs  float64 `json:"scrape_wall_max_ms"`
	IdleCPUMs     float64 `json:"idle_replica_cpu_ms_per_s"`
	// Routes are warm routes flat out alone; RoutesLoops with the scrape loops, which
	// made LoopScrapes scrapes, by status ("200", "503", "error"): every round's
	// together (their p99 the worst round's).
	Routes      RouteStats     `json:"routes"`
	RoutesLoops RouteStats     `json:"routes_with_loops"`
	LoopScrapes map[string]int `json:"loop_scrapes"`
	// RouteRatio is routes per second with the loops over without.
	RouteRatio float64 `json:"route_ratio"`
	// RSS before the slow readers, the largest sampled from then to the end of the
	// recovery, and at its end; SlowStatus is what they had been answered, by status
	// line ("none": nothing).
	RSSBefore  int64          `json:"rss_before_bytes"`
	RSSSlowMax int64          `json:"rss_slow_max_bytes"`
	RSSAfter   int64          `json:"rss_after_bytes"`
	SlowStatus map[string]int `json:"slow_status"`
}

// Metrics runs the /metrics measurement and writes metrics.json to cfg.Dir.
func Metrics(ctx context.Context, cfg MetricsConfig) (*MetricsResults, error) {
	cfg.fill()
	res := &MetricsResults{Started: time.Now().UTC(), Machine: machine(), Scopes: cfg.Scopes, Flags: cfg.Flags}
	sc := ScaleConfig{Bin: cfg.Bin, RedisScript: cfg.RedisScript, Dir: cfg.Dir, Workers: cfg.Workers, Log: cfg.Log}
	sc.logf("S=%d: fresh redis-server and replica %s", cfg.Scopes, strings.Join(cfg.Flags, " "))
	e, err := sc.start(ctx, "metrics", cfg.Flags...)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	p := Population{Prefix: "m-", Scopes: cfg.Scopes, Pods: 1, Sessions: 1}
	if err := sc.setup(ctx, e, p, &Size{}, false); err != nil {
		return nil, err
	}
	// A second route of every session: each scope has an affinity route as well as
	// the deployed one.
	if err := e.cl.routeAll(ctx, p, cfg.Workers); err != nil {
		return nil, err
	}
	if _, err := e.settle(ctx, cfg.SettleHorizon); err != nil {
		return nil, err
	}
	u := e.replica.URL + "/metrics"
	if err := cfg.size(ctx, u, res); err != nil {
		return nil, err
	}
	sc.logf("  one scrape: %d bytes (%.0f per scope), %d gzipped, %d series", res.Bytes, res.BytesPerScope, res.GzipBytes, res.Series)
	if err := cfg.scrapeCPU(ctx, e, u, res); err != nil {
		return nil, err
	}
	sc.logf("  a scrape costs %.1f ms of replica CPU and %.1f ms of Redis CPU (longest %.0f ms; idle %.1f ms/s)", res.ScrapeCPUMs, res.ScrapeRedisMs, res.ScrapeWallMs, res.IdleCPUMs)
	res.LoopScrapes = map[string]int{}
	for range cfg.Rounds {
		res.Routes.add(e.cl.routeLoad(ctx, p, cfg.Route, 0, cfg.Workers))
		rs, scrapes := cfg.routesWithLoops(ctx, e, p, u)
		res.RoutesLoops.add(rs)
		for st, n := range scrapes {
			res.LoopScrapes[st] += n
		}
	}
	if res.Routes.Routes > 0 {
		res.RouteRatio = (float64(res.RoutesLoops.Routes) / res.RoutesLoops.Seconds) / (float64(res.Routes.Routes) / res.Routes.Seconds)
	}
	sc.logf("  warm routes flat out, %d rounds: %.0f/s alone, %.0f/s with %d scrape loops (%v scrapes): ratio %.2f", cfg.Rounds,
		float64(res.Routes.Routes)/res.Routes.Seconds, float64(res.RoutesLoops.Routes)/res.RoutesLoops.Seconds, cfg.Loops, res.LoopScrapes, res.RouteRatio)
	if err := cfg.slowReaders(ctx, e, res); err != nil {
		return nil, err
	}
	sc.logf("  %d slow readers: RSS %.1f MB before, %.1f MB at most, %.1f MB %v after they left; answered %v", cfg.Slow,
		mb(res.RSSBefore), mb(res.RSSSlowMax), mb(res.RSSAfter), cfg.SlowRecover, res.SlowStatus)
	return res, writeJSON(filepath.Join(cfg.Dir, "metrics.json"), res)
}

// size reads one whole scrape as text, counts its samples, and gzips it.
func (c *MetricsConfig) size(ctx context.Context, u string, res *MetricsResults) error {
	body, err := get(ctx, &http.Client{Timeout: 10 * time.Minute, Transport: &http.Transport{DisableCompression: true}}, u)
	if err != nil {
		return err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var gz countWriter
	zw := gzip.NewWriter(&gz)
	for sc.Scan() {
		line := sc.Bytes()
		res.Bytes += int64(len(line)) + 1
		if len(line) > 0 && line[0] != '#' {
			res.Series++
		}
		_, _ = zw.Write(line)
		_, _ = zw.Write([]byte{'\n'})
	}
	if err := zw.Close(); err != nil {
		return err
	}
	res.GzipBytes = gz.n
	res.BytesPerScope = float64(res.Bytes) / float64(c.Scopes)
	return sc.Err()
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// promScrape is one scrape as Prometheus makes it (text format, gzip); it returns the
// status ("200", "503", or "error").
func promScrape(ctx context.Context, hc *http.Client, u string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "error"
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=0.9,*/*;q=0.1")
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := hc.Do(req)
	if err != nil {
		return "error"
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return "error"
	}
	return fmt.Sprint(resp.StatusCode)
}

func scrapeClient() *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableCompression: true}}
}

// scrapeCPU measures an idle window and then Scrapes scrapes one every ScrapeGap, a
// window of the same length.
func (c *MetricsConfig) scrapeCPU(ctx context.Context, e *env, u string, res *MetricsResults) error {
	window := time.Duration(c.Scrapes) * c.ScrapeGap
	a, err := e.take(ctx)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(window):
	}
	b, err := e.take(ctx)
	if err != nil {
		return err
	}
	hc := scrapeClient()
	var longest time.Duration
	for range c.Scrapes {
		t0 := time.Now()
		if st := promScrape(ctx, hc, u); st != "200" {
			return fmt.Errorf("scrape: %s", st)
		}
		longest = max(longest, time.Since(t0))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(c.ScrapeGap - time.Since(t0)):
		}
	}
	d, err := e.take(ctx)
	if err != nil {
		return err
	}
	idle, idleRedis := b.cpu-a.cpu, b.redis.CPU-a.redis.CPU
	idleSecs, busySecs := b.at.Sub(a.at).Seconds(), d.at.Sub(b.at).Seconds()
	perScrape := func(busy, idle time.Duration) float64 {
		ms := busy.Seconds()*1000 - idle.Seconds()*1000*busySecs/idleSecs
		return ms / float64(c.Scrapes)
	}
	res.ScrapeCPUMs = perScrape(d.cpu-b.cpu, idle)
	res.ScrapeRedisMs = perScrape(d.redis.CPU-b.redis.CPU, idleRedis)
	res.ScrapeWallMs = float64(longest) / float64(time.Millisecond)
	res.IdleCPUMs = idle.Seconds() * 1000 / idleSecs
	return nil
}

// add sums the routes of another window into s.
func (s *RouteStats) add(o RouteStats) {
	s.Routes += o.Routes
	s.Errors += o.Errors
	s.Seconds += o.Seconds
	if s.FirstError == "" {
		s.FirstError = o.FirstError
	}
	s.P50Ms, s.P99Ms, s.MaxMs = max(s.P50Ms, o.P50Ms), max(s.P99Ms, o.P99Ms), max(s.MaxMs, o.MaxMs)
}

// routesWithLoops routes flat out for Route while Loops scrape loops run.
func (c *MetricsConfig) routesWithLoops(ctx context.Context, e *env, p Population, u string) (RouteStats, map[string]int) {
	lctx, stop := context.WithCancel(ctx)
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	for range c.Loops {
		wg.Go(func() {
			hc := scrapeClient()
			for lctx.Err() == nil {
				st := promScrape(lctx, hc, u)
				if lctx.Err() != nil {
					return
				}
				mu.Lock()
				statuses[st]++
				mu.Unlock()
			}
		})
	}
	rs := e.cl.routeLoad(ctx, p, c.Route, 0, c.Workers)
	stop()
	wg.Wait()
	return rs, statuses
}

// slowReaders opens Slow connections that send GET /metrics and never read, holds
// them for SlowHold sampling the replica's RSS, reads what each was answered, closes
// them, and samples the RSS for SlowRecover more.
func (c *MetricsConfig) slowReaders(ctx context.Context, e *env, res *MetricsResults) error {
	addr, err := url.Parse(e.replica.URL)
	if err != nil {
		return err
	}
	if res.RSSBefore, err = procRSS(e.replica.PID); err != nil {
		return err
	}
	var conns []net.Conn
	defer func() {
		for _, cn := range conns {
			cn.Close()
		}
	}()
	var d net.Dialer
	for range c.Slow {
		cn, err := d.DialContext(ctx, "tcp", addr.Host)
		if err != nil {
			return err
		}
		conns = append(conns, cn)
		if _, err := io.WriteString(cn, "GET /metrics HTTP/1.1\r\nHost: "+addr.Host+"\r\n\r\n"); err != nil {
			return err
		}
	}
	var peak atomic.Int64
	sample := func(d time.Duration) error {
		end := time.Now().Add(d)
		for {
			v, err := procRSS(e.replica.PID)
			if err != nil {
				return err
			}
			peak.Store(max(peak.Load(), v))
			if time.Now().After(end) {
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	if err := sample(c.SlowHold); err != nil {
		return err
	}
	res.SlowStatus = map[string]int{}
	for _, cn := range conns {
		_ = cn.SetReadDeadline(time.Now().Add(time.Second))
		line, _ := bufio.NewReader(cn).ReadString('\n')
		st := "none"
		if f := strings.Fields(line); len(f) >= 2 {
			st = f[1]
		}
		res.SlowStatus[st]++
		cn.Close()
	}
	conns = nil
	if err := sample(c.SlowRecover); err != nil {
		return err
	}
	res.RSSSlowMax = peak.Load()
	res.RSSAfter, err = procRSS(e.replica.PID)
	return err
}

// WriteText writes the results as the lines of docs/performance.md.
func (r *MetricsResults) WriteText(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "/metrics run of %s on %s; S = %d scopes of one pod and one session; serve flags: %s\n",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Scopes, strings.Join(r.Flags, " "))
	fmt.Fprintf(w, "one scrape: %.2f MB (%.0f bytes per scope), %.2f MB gzipped, %d series\n", mb(r.Bytes), r.BytesPerScope, mb(r.GzipBytes), r.Series)
	fmt.Fprintf(w, "CPU per scrape (gzip): replica %.1f ms, Redis %.1f ms; longest scrape %.0f ms; idle replica CPU %.1f ms/s\n",
		r.ScrapeCPUMs, r.ScrapeRedisMs, r.ScrapeWallMs, r.IdleCPUMs)
	fmt.Fprintf(w, "warm routes flat out: %.0f/s alone (p99 %.2f ms), %.0f/s with the scrape loops (p99 %.2f ms, scrapes %v): ratio %.2f\n",
		float64(r.Routes.Routes)/r.Routes.Seconds, r.Routes.P99Ms, float64(r.RoutesLoops.Routes)/r.RoutesLoops.Seconds, r.RoutesLoops.P99Ms, r.LoopScrapes, r.RouteRatio)
	fmt.Fprintf(w, "slow readers: RSS %.1f MB before, %.1f MB at most (+%.1f MB), %.1f MB after; answered %v\n",
		mb(r.RSSBefore), mb(r.RSSSlowMax), mb(r.RSSSlowMax-r.RSSBefore), mb(r.RSSAfter), r.SlowStatus)
	_, err := io.WriteString(out, w.String())
	return err
}
