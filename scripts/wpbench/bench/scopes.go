package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/warmpool/warmpool/internal/defaults"
)

// Defaults of ScopesConfig.
const (
	DefaultListScopes   = 10_000
	DefaultListReaders  = 20
	DefaultListWindow   = 12 * time.Second
	DefaultListLimit    = 500
	DefaultTouchRate    = 200
	DefaultTouchWorkers = 8
)

// The tokens of the probe's replicas: readers and touches use the gateway's, the
// setup the admin's.
const (
	gatewayToken = "bench-gateway"
	adminToken   = "bench-admin"
)

// ScopesConfig is the probe of GET /v1/scopes (wpbench scopes, issue 31): S scopes of
// one pod and one session on a fresh redis-server and two replicas with auth on,
// then two windows of Window each: touches of random sessions on the second replica
// alone, and the same touches while Readers callers with the gateway token page
// through GET /v1/scopes on the first, each from the first page to the last (Limit
// scopes a page) and again. An older server, which has no pages, answers every
// scope at once: each of its answers is a whole pass, so the same command measures
// both.
type ScopesConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and scopes.json.
	Bin, RedisScript, Dir string
	// Flags are added to `warmpool serve`'s.
	Flags []string
	// Scopes is S; Workers the concurrency of the setup.
	Scopes, Workers int
	// Readers page through the scopes at once, Limit scopes a page, each waiting
	// ReaderGap after each answer (0: flat out).
	Readers, Limit int
	ReaderGap      time.Duration
	// Window is the length of each window.
	Window time.Duration
	// TouchRate touches a second, from TouchWorkers at once, on the second replica.
	TouchRate    float64
	TouchWorkers int
	// SettleHorizon is that of ScaleConfig; DefaultSettleHorizon when zero.
	SettleHorizon time.Duration
	Log           io.Writer
}

func (c *ScopesConfig) fill() {
	defaults.Positive(&c.Scopes, DefaultListScopes)
	defaults.Positive(&c.Workers, DefaultWorkers)
	defaults.Positive(&c.Readers, DefaultListReaders)
	defaults.Positive(&c.Limit, DefaultListLimit)
	defaults.Positive(&c.Window, DefaultListWindow)
	defaults.Positive(&c.TouchRate, DefaultTouchRate)
	defaults.Positive(&c.TouchWorkers, DefaultTouchWorkers)
	if c.SettleHorizon == 0 {
		c.SettleHorizon = DefaultSettleHorizon
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// ScopesResults is what a probe of GET /v1/scopes found.
type ScopesResults struct {
	Started time.Time `json:"started"`
	Machine string    `json:"machine"`
	Scopes  int       `json:"scopes"`
	Readers int       `json:"readers"`
	Gap     float64   `json:"reader_gap_s,omitempty"`
	Limit   int       `json:"limit"`
	Window  float64   `json:"window_s"`
	Flags   []string  `json:"flags,omitempty"`
	// RestRSS is each replica's RSS before the windows (the reader's first).
	RestRSS []int64 `json:"rest_rss_bytes"`
	// Touches is the window of touches alone, WithReaders the window with the readers.
	Touches     *ListWindow `json:"touches_alone"`
	WithReaders *ListWindow `json:"with_readers"`
}

// ListWindow is one window of the probe.
type ListWindow struct {
	// Touch is the second replica's touches; Ping is a PING of Redis from this process
	// at the touches' rate, which tells Redis's own delay from the replica's.
	Touch RouteStats `json:"touch"`
	Ping  RouteStats `json:"redis_ping"`
	// PeakRSS is each replica's largest RSS sampled in the window.
	PeakRSS []int64 `json:"peak_rss_bytes"`
	// Pages counts the readers' answers by status (0: no answer), Passes the walks
	// from the first page to the last that ended.
	Pages      map[int]int `json:"pages_by_status,omitempty"`
	Passes     int         `json:"passes,omitempty"`
	FirstError string      `json:"first_error,omitempty"`
	// PageP50Ms and PageP99Ms are the readers' answer times (200s).
	PageP50Ms float64 `json:"page_p50_ms,omitempty"`
	PageP99Ms float64 `json:"page_p99_ms,omitempty"`
	// ReplicaCPU is each replica's CPU seconds a second, RedisCPU Redis's and
	// BenchCPU this process's (the readers and the touches): on a small machine they
	// share the cores.
	ReplicaCPU []float64 `json:"replica_cpu"`
	RedisCPU   float64   `json:"redis_cpu"`
	BenchCPU   float64   `json:"bench_cpu"`
	LoadAvg    string    `json:"load_avg"`
}

// Scopes runs the probe of GET /v1/scopes and writes scopes.json to cfg.Dir.
func Scopes(ctx context.Context, cfg ScopesConfig) (*ScopesResults, error) {
	cfg.fill()
	res := &ScopesResults{Started: time.Now().UTC(), Machine: machine(), Scopes: cfg.Scopes, Readers: cfg.Readers, Gap: cfg.ReaderGap.Seconds(), Limit: cfg.Limit,
		Window: cfg.Window.Seconds(), Flags: cfg.Flags}
	sc := ScaleConfig{Bin: cfg.Bin, RedisScript: cfg.RedisScript, Dir: cfg.Dir, Workers: cfg.Workers, Log: cfg.Log}
	sc.logf("S=%d scopes of one pod and one session: fresh redis-server and two replicas %s", cfg.Scopes, strings.Join(cfg.Flags, " "))
	// The replicas share the fake driver's pods and the config store, as replicas of
	// one deployment do.
	flags := append(slices.Clone(cfg.Flags), "--fake-state-dir", filepath.Join(cfg.Dir, "scopes", "fake"),
		"--auth-token", gatewayToken, "--admin-token", adminToken)
	e, err := sc.start(ctx, "scopes", flags...)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	e.cl = e.cl.withToken(adminToken)
	p := Population{Prefix: "l-", Scopes: cfg.Scopes, Pods: 1, Sessions: 1}
	if err := sc.setup(ctx, e, p, &Size{}, false); err != nil {
		return nil, err
	}
	p2, err := startReplica(ctx, cfg.Bin, filepath.Join(cfg.Dir, "scopes"), "replica2", e.redis,
		append(flags, "--store", filepath.Join(cfg.Dir, "scopes", "replica.db"))...)
	if err != nil {
		return nil, err
	}
	defer p2.stop()
	if _, err := e.settle(ctx, cfg.SettleHorizon); err != nil {
		return nil, err
	}
	for _, pid := range []int{e.replica.PID, p2.PID} {
		rss, err := procRSS(pid)
		if err != nil {
			return nil, err
		}
		res.RestRSS = append(res.RestRSS, rss)
	}
	touches := newClient(p2.URL, cfg.TouchWorkers+2).withToken(gatewayToken)
	readers := newClient(e.replica.URL, cfg.Readers+2).withToken(gatewayToken)
	if res.Touches, err = cfg.window(ctx, e, touches, nil, p, p2.PID); err != nil {
		return nil, err
	}
	sc.logf("  touches alone on replica 2: p50 %.2f ms, p99 %.2f ms (%d, %d errors); peak RSS %s MB", res.Touches.Touch.P50Ms,
		res.Touches.Touch.P99Ms, res.Touches.Touch.Routes, res.Touches.Touch.Errors, mbList(res.Touches.PeakRSS))
	if res.WithReaders, err = cfg.window(ctx, e, touches, readers, p, p2.PID); err != nil {
		return nil, err
	}
	w := res.WithReaders
	sc.logf("  with %d readers on replica 1: pages %v, %d passes, page p99 %.1f ms; touches p50 %.2f ms, p99 %.2f ms (%d errors); peak RSS %s MB (rest %s MB); CPU replicas %s, Redis %.2f, wpbench %.2f",
		cfg.Readers, w.Pages, w.Passes, w.PageP99Ms, w.Touch.P50Ms, w.Touch.P99Ms, w.Touch.Errors, mbList(w.PeakRSS), mbList(res.RestRSS),
		floatList(w.ReplicaCPU, "%.2f"), w.RedisCPU, w.BenchCPU)
	return res, writeJSON(filepath.Join(cfg.Dir, "scopes.json"), res)
}

// window runs the touches of p on touches for Window, and with readers (unless nil)
// the readers' walks through GET /v1/scopes, sampling both replicas' RSS.
func (c *ScopesConfig) window(ctx context.Context, e *env, touches, readers *client, p Population, pid2 int) (*ListWindow, error) {
	w := &ListWindow{}
	pids := []int{e.replica.PID, pid2, os.Getpid()}
	cpu0, err := cpuOf(pids)
	if err != nil {
		return nil, err
	}
	a, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	peak := samplePeakRSS(100*time.Millisecond, e.replica.PID, pid2)
	var wg sync.WaitGroup
	var walks walkStats
	if readers != nil {
		wctx, cancel := context.WithTimeout(ctx, c.Window)
		defer cancel()
		for range c.Readers {
			wg.Go(func() { walks.add(c.walk(wctx, readers)) })
		}
	}
	wg.Go(func() {
		w.Ping = callLoad(ctx, c.Window, c.TouchRate, 1, func(ctx context.Context) error { return e.redis.rdb.Ping(ctx).Err() })
	})
	w.Touch = touches.touchLoad(ctx, p, c.Window, c.TouchRate, c.TouchWorkers)
	wg.Wait()
	w.PeakRSS = peak()
	b, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return nil, err
	}
	secs := time.Since(t0).Seconds()
	cpu1, err := cpuOf(pids)
	if err != nil {
		return nil, err
	}
	for i := range 2 {
		w.ReplicaCPU = append(w.ReplicaCPU, (cpu1[i]-cpu0[i]).Seconds()/secs)
	}
	w.BenchCPU = (cpu1[2] - cpu0[2]).Seconds() / secs
	w.RedisCPU = (b.CPU - a.CPU).Seconds() / secs
	w.LoadAvg = loadAvg()
	if readers != nil {
		w.Pages, w.Passes, w.FirstError = walks.pages, walks.passes, walks.first
		w.PageP50Ms, w.PageP99Ms = quantileMs(walks.took, 0.50), quantileMs(walks.took, 0.99)
	}
	return w, nil
}

// walkStats is what readers found.
type walkStats struct {
	mu     sync.Mutex
	pages  map[int]int
	passes int
	first  string
	took   []time.Duration
}

func (s *walkStats) add(o *walkStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pages == nil {
		s.pages = map[int]int{}
	}
	for k, v := range o.pages {
		s.pages[k] += v
	}
	s.passes += o.passes
	s.took = append(s.took, o.took...)
	if s.first == "" {
		s.first = o.first
	}
}

// walk pages through GET /v1/scopes with cl until ctx ends: from the first page to
// the one whose next is null (or that has no next: a server without pages), and
// again; a failed page is asked again.
func (c *ScopesConfig) walk(ctx context.Context, cl *client) *walkStats {
	st := &walkStats{pages: map[int]int{}}
	after := ""
	for ctx.Err() == nil {
		q := url.Values{"limit": {strconv.Itoa(c.Limit)}}
		if after != "" {
			q.Set("after", after)
		}
		var page struct {
			Scopes []json.RawMessage `json:"scopes"`
			Next   *string           `json:"next"`
		}
		t0 := time.Now()
		err := cl.get(ctx, "/v1/scopes?"+q.Encode(), &page)
		took := time.Since(t0)
		var se *statusError
		switch {
		case ctx.Err() != nil:
			return st // cut by the window's end
		case errors.As(err, &se):
			st.pages[se.status]++
		case err != nil:
			st.pages[0]++
		default:
			st.pages[200]++
			st.took = append(st.took, took)
		}
		if c.ReaderGap > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(c.ReaderGap):
			}
		}
		if err != nil {
			if st.first == "" {
				st.first = err.Error()
			}
			continue
		}
		if page.Next == nil {
			st.passes++
			after = ""
			continue
		}
		after = *page.Next
	}
	return st
}

// gapText says how the readers were paced.
func gapText(gap float64) string {
	if gap <= 0 {
		return "flat out"
	}
	return fmt.Sprintf("%.0f ms after each answer", 1000*gap)
}

// cpuOf reads the CPU time of each process of pids.
func cpuOf(pids []int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, pid := range pids {
		var err error
		if out[i], err = procCPU(pid); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// quantileMs is the q quantile of d in milliseconds, 0 for none.
func quantileMs(d []time.Duration, q float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))]) / float64(time.Millisecond)
}

func mbList(v []int64) string {
	f := make([]float64, len(v))
	for i, x := range v {
		f[i] = mb(x)
	}
	return floatList(f, "%.0f")
}

// WriteText writes the results as the lines of docs/reliability.md.
func (r *ScopesResults) WriteText(out io.Writer) error {
	w := new(strings.Builder) // one write to out, whose error is the one to check
	fmt.Fprintf(w, "GET /v1/scopes probe of %s on %s; S = %d scopes of one pod and one session, two replicas; %d readers on replica 1 (%s), %d scopes a page, windows of %.0f s; serve flags: %s\n",
		r.Started.Format("2006-01-02 15:04 UTC"), r.Machine, r.Scopes, r.Readers, gapText(r.Gap), r.Limit, r.Window, strings.Join(r.Flags, " "))
	fmt.Fprintf(w, "RSS at rest: %s MB (replica 1 / replica 2)\n", mbList(r.RestRSS))
	for _, x := range []struct {
		name string
		w    *ListWindow
	}{{"touches alone", r.Touches}, {"with the readers", r.WithReaders}} {
		fmt.Fprintf(w, "%s: touches on replica 2 p50 %.2f ms, p99 %.2f ms, max %.1f ms (%d, %d errors); Redis PING p50 %.2f ms, p99 %.2f ms; peak RSS %s MB; CPU (cores) replicas %s, Redis %.2f, wpbench %.2f; load %s",
			x.name, x.w.Touch.P50Ms, x.w.Touch.P99Ms, x.w.Touch.MaxMs, x.w.Touch.Routes, x.w.Touch.Errors, x.w.Ping.P50Ms, x.w.Ping.P99Ms, mbList(x.w.PeakRSS),
			floatList(x.w.ReplicaCPU, "%.2f"), x.w.RedisCPU, x.w.BenchCPU, x.w.LoadAvg)
		if x.w.Pages != nil {
			fmt.Fprintf(w, "; pages by status %v, %d passes through every scope, page p50 %.1f ms, p99 %.1f ms", x.w.Pages, x.w.Passes, x.w.PageP50Ms, x.w.PageP99Ms)
			if x.w.FirstError != "" {
				fmt.Fprintf(w, "; first error: %.200s", x.w.FirstError)
			}
		}
		w.WriteString("\n")
	}
	_, err := io.WriteString(out, w.String())
	return err
}
