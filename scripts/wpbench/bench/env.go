package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/warmpool/warmpool/redisstore"
)

// env is one Redis and one replica under measurement.
type env struct {
	redis   *redisServer
	replica *process
	hc      *http.Client
	cl      *client
	// bare: the process under measurement serves no /metrics (the baseline).
	bare bool
	// metrics is the last scrape of the replica's window metrics, taken at metricsAt.
	metrics   series
	metricsAt time.Time
	// pause lets the replica collect the garbage of a scrape before a window opens.
	pause time.Duration
}

func (c *ScaleConfig) start(ctx context.Context, name string, flags ...string) (*env, error) {
	dir := filepath.Join(c.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r, err := startRedis(ctx, c.RedisScript, filepath.Join(dir, "redis"))
	if err != nil {
		return nil, err
	}
	p, err := startReplica(ctx, c.Bin, dir, "replica", r, flags...)
	if err != nil {
		r.stop()
		return nil, err
	}
	return &env{redis: r, replica: p, hc: &http.Client{Timeout: 5 * time.Minute}, cl: newClient(p.URL, c.Workers+8), pause: max(c.ScrapePause, 0)}, nil
}

func (e *env) stop() {
	e.replica.stop()
	e.redis.stop()
}

// sample is Redis's and the process's counters at one end of a window.
type sample struct {
	at    time.Time
	cpu   time.Duration
	redis redisStats
}

func (e *env) take(ctx context.Context) (sample, error) {
	st, err := readRedis(ctx, e.redis.rdb)
	if err != nil {
		return sample{}, err
	}
	cpu, err := procCPU(e.replica.PID)
	return sample{at: time.Now(), cpu: cpu, redis: st}, err
}

// scrapeMetrics reads the metric families of a window into e.metrics.
func (e *env) scrapeMetrics(ctx context.Context) error {
	u := e.replica.URL + "/metrics?"
	for i, n := range scrapedMetrics {
		if i > 0 {
			u += "&"
		}
		u += "name[]=" + n
	}
	m, err := scrape(ctx, e.hc, u)
	e.metrics, e.metricsAt = m, time.Now()
	return err
}

// measure runs work (nil: the window stays idle for d) between two samples. The
// replica's counters come from the scrapes around the window (the last one of the
// window before, if any), so their rates are over a little more than the window.
func (e *env) measure(ctx context.Context, name string, d time.Duration, work func(ctx context.Context) RouteStats) (*Phase, error) {
	var before series
	var beforeAt time.Time
	if !e.bare {
		if e.metrics == nil {
			if err := e.scrapeMetrics(ctx); err != nil {
				return nil, err
			}
		}
		before, beforeAt = e.metrics, e.metricsAt
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(e.pause):
		}
	}
	a, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	var rs *RouteStats
	if work != nil {
		st := work(ctx)
		rs = &st
	} else {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(d):
		}
	}
	b, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	var rss, anon int64
	if err := procStatus(e.replica.PID, map[string]*int64{"VmRSS": &rss, "RssAnon": &anon}); err != nil {
		return nil, err
	}
	ph := &Phase{Name: name, LoadAvg: loadAvg(), Route: rs, UsedMemory: b.redis.UsedMemory,
		Commands: map[string]float64{}, Scripts: map[string]float64{}, Sweeps: map[string]SweepStats{}}
	ph.Seconds = b.at.Sub(a.at).Seconds()
	ph.ReplicaCPU = (b.cpu - a.cpu).Seconds()
	ph.RedisCPU = (b.redis.CPU - a.redis.CPU).Seconds()
	for cmd, n := range b.redis.Calls {
		if cmd == "info" {
			continue
		}
		if v := float64(n-a.redis.Calls[cmd]) / ph.Seconds; v > 0 {
			ph.Commands[cmd] = v
			ph.CommandsPS += v
		}
	}
	ph.RSS, ph.Anon = rss, anon
	if e.bare {
		return ph, nil
	}
	if err := e.scrapeMetrics(ctx); err != nil {
		return nil, err
	}
	m, mSeconds := e.metrics.delta(before), e.metricsAt.Sub(beforeAt).Seconds()
	for script, n := range m.byLabel("warmpool_redis_script_duration_seconds_count", "script") {
		if n > 0 {
			ph.Scripts[script] = n / mSeconds
		}
	}
	ph.ProbesPS = ph.Scripts["pod_health"]
	ph.BeyondProbesPS = ph.CommandsPS - probeCommands*ph.ProbesPS
	for _, kind := range []string{"due", "watch", "reconcile"} {
		match := `sweep="` + kind
		runs := m.sum("warmpool_sweeper_runs_total", match) - m.sum("warmpool_sweeper_runs_total", match, `outcome="skipped"`)
		st := SweepStats{Runs: int(runs)}
		if n := m.sum("warmpool_sweeper_lock_held_seconds_count", match); n > 0 {
			st.MeanMs = 1000 * m.sum("warmpool_sweeper_lock_held_seconds_sum", match) / n
			st.MaxMs = 1000 * m.histMax("warmpool_sweeper_lock_held_seconds", match)
			if math.IsInf(st.MaxMs, 1) {
				st.MaxMs = -1 // JSON has no +Inf
			}
		}
		ph.Sweeps[kind] = st
	}
	return ph, nil
}

// settle waits until no scope is due within horizon, at most settleTimeout, and
// returns how many still are. The setup leaves work due at once (each publish) and a
// little later (each cold route notes its claim's deadline, rm.DefaultClaimTTL on):
// the sweeps that find nothing else to do must be over before a window opens.
func (e *env) settle(ctx context.Context, horizon time.Duration) (int, error) {
	return settleDue(ctx, e.redis.rdb, horizon)
}

// settleDue is settle on the due index of rdb: one server's, or a Cluster's.
func settleDue(ctx context.Context, rdb redis.Cmdable, horizon time.Duration) (int, error) {
	keys := redisstore.NewKeyspace("")
	deadline := time.Now().Add(settleTimeout)
	for {
		now := fmt.Sprint(time.Now().Add(max(horizon, 0)).UnixMilli())
		due := 0
		for k := range redisstore.DueShards {
			n, err := rdb.ZCount(ctx, keys.DueIndex(k), "-inf", now).Result()
			if err != nil {
				return 0, err
			}
			due += int(n)
		}
		if due == 0 || time.Now().After(deadline) {
			return due, nil
		}
		select {
		case <-ctx.Done():
			return due, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
