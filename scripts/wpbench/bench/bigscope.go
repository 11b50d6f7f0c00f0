package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/defaults"
	"github.com/warmpool/warmpool/redisstore"
)

// Defaults of BigScopeConfig.
const (
	DefaultBigScopeOps     = 400
	DefaultBigScopeWorkers = 4
	DefaultBigScopeIdle    = 100
	DefaultBigScopeCold    = 40
	DefaultBurstRoutes     = 5_000
	DefaultBurstDeploy     = 2 * time.Second
	bigScope               = "big"
)

// BigScopeConfig is one run of wpbench bigscope (issue 33): one scope of Pods pods at
// each pod_concurrency, on a fresh redis-server and fake-driver replica whose sweeps
// are off, and what a warm route, a release, a warm acquire and a cold route cost Redis
// there; then cold bursts of BurstRoutes routes into one empty scope.
type BigScopeConfig struct {
	// Bin is the warmpool binary; RedisScript is scripts/redis.sh; Dir holds the
	// servers' files and bigscope.json.
	Bin, RedisScript, Dir string
	// Sizes are the scope's pods, PodConcurrency the pod_concurrency of each run.
	Sizes, PodConcurrency []int
	// Ops is the least operations of each kind measured; Workers the concurrent calls.
	Ops, Workers int
	// Idle pods of each size (at most half of it) take the warm routes and acquires;
	// Cold is the deploys of each cold window.
	Idle, Cold int
	// BurstRoutes routes arrive at each of BurstRates a second into one empty scope of
	// each pod_concurrency, the fake driver taking BurstDeploy a deploy (no burst when
	// BurstRoutes is negative).
	BurstRoutes int
	BurstRates  []float64
	BurstDeploy time.Duration
	// IdlePods warm pods in one scope are then left alone for IdleWindow, sweeps on
	// (no idle scope when IdlePods is negative).
	IdlePods   int
	IdleWindow time.Duration
	Log        io.Writer
}

func (c *BigScopeConfig) fill() {
	if len(c.Sizes) == 0 {
		c.Sizes = []int{10, 1_000, 10_000}
	}
	if len(c.PodConcurrency) == 0 {
		c.PodConcurrency = []int{1, 8}
	}
	defaults.Positive(&c.Ops, DefaultBigScopeOps)
	defaults.Positive(&c.Workers, DefaultBigScopeWorkers)
	defaults.Positive(&c.Idle, DefaultBigScopeIdle)
	defaults.Positive(&c.Cold, DefaultBigScopeCold)
	if c.BurstRoutes == 0 {
		c.BurstRoutes = DefaultBurstRoutes
	}
	defaults.Positive(&c.BurstDeploy, DefaultBurstDeploy)
	if len(c.BurstRates) == 0 {
		c.BurstRates = []float64{500, 2_000}
	}
	if c.IdlePods == 0 {
		c.IdlePods = DefaultIdlePods
	}
	defaults.Positive(&c.IdleWindow, DefaultIdleWindow)
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// OpRow is what one kind of operation cost at one size: Redis commands (INFO
// commandstats, those scripts run included) and Redis CPU per operation, and the
// latency of the calls.
type OpRow struct {
	Name string `json:"name"`
	// Top are the commands Redis spent the most time in (µs per operation; EVALSHA
	// holds its scripts' commands too), the most first.
	Top        []CommandTime `json:"top_commands"`
	Ops        int           `json:"ops"`
	Commands   float64       `json:"commands_per_op"`
	RedisUs    float64       `json:"redis_cpu_us_per_op"`
	P50Ms      float64       `json:"p50_ms"`
	P99Ms      float64       `json:"p99_ms"`
	Errors     int           `json:"errors"`
	FirstError string        `json:"first_error,omitempty"`
}

// CommandTime is the time Redis spent in one command per operation.
type CommandTime struct {
	Command string  `json:"command"`
	Us      float64 `json:"us_per_op"`
}

// BigScopeRow is one size at one pod_concurrency.
type BigScopeRow struct {
	Pods           int     `json:"pods"`
	PodConcurrency int     `json:"pod_concurrency"`
	Ops            []OpRow `json:"ops"`
}

// BigScopeResults is a bigscope run.
type BigScopeResults struct {
	Started time.Time     `json:"started"`
	Machine string        `json:"machine"`
	Rows    []BigScopeRow `json:"rows"`
	Bursts  []BurstRow    `json:"bursts,omitempty"`
	Idle    *IdleRow      `json:"idle,omitempty"`
}

// The operations of a row.
const (
	opWarmRoute = "warm route"
	opRelease   = "release"
	opAcquire   = "warm acquire"
	opHoldEnd   = "hold release"
	opColdRoute = "cold route"
)

// BigScope runs the measurements and writes bigscope.json to cfg.Dir.
func BigScope(ctx context.Context, cfg BigScopeConfig) (*BigScopeResults, error) {
	cfg.fill()
	res := &BigScopeResults{Started: time.Now().UTC(), Machine: machine()}
	for _, pc := range cfg.PodConcurrency {
		for _, n := range cfg.Sizes {
			row, err := cfg.size(ctx, n, pc)
			if err != nil {
				return res, fmt.Errorf("%d pods of %d: %w", n, pc, err)
			}
			res.Rows = append(res.Rows, *row)
		}
	}
	if cfg.BurstRoutes > 0 {
		for _, pc := range cfg.PodConcurrency {
			for _, rate := range cfg.BurstRates {
				b, err := cfg.burst(ctx, rate, pc)
				if err != nil {
					return res, fmt.Errorf("burst at %.0f/s: %w", rate, err)
				}
				res.Bursts = append(res.Bursts, *b)
			}
		}
	}
	if cfg.IdlePods > 0 {
		idle, err := cfg.idle(ctx)
		if err != nil {
			return res, fmt.Errorf("idle scope: %w", err)
		}
		res.Idle = idle
	}
	return res, writeJSON(filepath.Join(cfg.Dir, "bigscope.json"), res)
}

func (c *BigScopeConfig) scale() *ScaleConfig {
	return &ScaleConfig{Bin: c.Bin, RedisScript: c.RedisScript, Dir: c.Dir, Workers: c.Workers * 4, Log: c.Log, ScrapePause: -1}
}

// config is the scope's config: room for pods pods of pc sessions, nothing expires
// while measured, no warm pool kept, no queue, no bound on deploys in flight.
func bigConfig(pods, pc int) warmpool.ScopeConfig {
	c := warmpool.DefaultScopeConfig()
	c.Pool.PodConcurrency = pc
	c.Pool.MaxConcurrency = pc * pods
	c.Pool.MinIdlePods = 0
	c.Pool.PodTTLS = 86400
	c.Pool.SessionTTLS = 86400
	c.Pool.HoldTTLS = 3600
	c.Pool.QueueSize = 0
	c.Pool.WaitTimeoutS = 0
	return c
}

// meter adds up Redis's work over the windows of one kind of operation.
type meter struct {
	ops      int
	commands int64
	usec     map[string]int64
	cpu      time.Duration
	lat      []time.Duration
	errors   int
	first    string
}

func (m *meter) row(name string) OpRow {
	r := OpRow{Name: name, Ops: m.ops, Errors: m.errors, FirstError: m.first}
	if m.ops > 0 {
		r.Commands = float64(m.commands) / float64(m.ops)
		r.RedisUs = float64(m.cpu.Microseconds()) / float64(m.ops)
		for cmd, us := range m.usec {
			r.Top = append(r.Top, CommandTime{cmd, float64(us) / float64(m.ops)})
		}
		slices.SortFunc(r.Top, func(a, b CommandTime) int { return cmp.Compare(b.Us, a.Us) })
		r.Top = r.Top[:min(len(r.Top), 6)]
	}
	r.P50Ms, r.P99Ms = quantileMs(m.lat, 0.50), quantileMs(m.lat, 0.99)
	return r
}

// window runs n calls of op on workers goroutines between two reads of Redis's
// counters and adds what they cost to m.
func (m *meter) window(ctx context.Context, rdb *redis.Client, n, workers int, op func(ctx context.Context, i int) error) error {
	a, err := readRedis(ctx, rdb)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	_ = parallel(ctx, n, workers, func(ctx context.Context, i int) error {
		t := time.Now()
		err := op(ctx, i)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			m.errors++
			if m.first == "" {
				m.first = err.Error()
			}
			return nil // the others go on: the errors are counted
		}
		m.lat = append(m.lat, time.Since(t))
		return nil
	})
	b, err := readRedis(ctx, rdb)
	if err != nil {
		return err
	}
	if m.usec == nil {
		m.usec = map[string]int64{}
	}
	for cmd, v := range b.Calls {
		if cmd != "info" {
			m.commands += v - a.Calls[cmd]
			m.usec[cmd] += b.Usec[cmd] - a.Usec[cmd]
		}
	}
	m.cpu += b.CPU - a.CPU
	m.ops += n
	return nil
}

// size measures one row: a fresh Redis and replica, the scope filled, then cycles of
// warm routes and their releases, of warm acquires and their hold releases, and of
// cold routes, until each kind has Ops operations (cold ones: Cold deploys a cycle).
func (c *BigScopeConfig) size(ctx context.Context, pods, pc int) (*BigScopeRow, error) {
	sc := c.scale()
	name := fmt.Sprintf("bigscope-%d-%d", pods, pc)
	sc.logf("%s: fresh redis-server and replica, sweeps off", name)
	e, err := sc.start(ctx, name, "--sweep-interval", "1h", "--reconcile-interval", "1h")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	idle := max(1, min(c.Idle, pods/2))
	cold := c.Cold
	if err := e.cl.setupCall(ctx, http.MethodPut, "/v1/scopes/"+bigScope+"/config", bigConfig(pods+cold, pc)); err != nil {
		return nil, err
	}
	store := redisstore.NewStore(e.redis.rdb, redisstore.DefaultPrefix)
	t := time.Now()
	if err := fillScope(ctx, e.redis.rdb, store, pods, idle, pc); err != nil {
		return nil, fmt.Errorf("fill: %w", err)
	}
	sc.logf("  %d pods (%d idle, the last registered), %d sessions, in %.1fs", pods, idle, (pods-idle)*pc, time.Since(t).Seconds())
	var warm, release, acquire, holdEnd, coldRoute meter
	rdb := e.redis.rdb
	for cycle := 0; warm.ops < c.Ops; cycle++ {
		n := idle * pc
		sess := func(i int) string { return fmt.Sprintf("w%d-%d", cycle, i) }
		if err := warm.window(ctx, rdb, n, c.Workers, func(ctx context.Context, i int) error { return e.cl.route(ctx, bigScope, sess(i)) }); err != nil {
			return nil, err
		}
		if err := release.window(ctx, rdb, n, c.Workers, func(ctx context.Context, i int) error { return e.cl.endSession(ctx, bigScope, sess(i)) }); err != nil {
			return nil, err
		}
	}
	for acquire.ops < c.Ops {
		holds := make([]hold, idle)
		if err := acquire.window(ctx, rdb, idle, c.Workers, func(ctx context.Context, i int) error {
			var err error
			holds[i], err = e.cl.acquire(ctx, bigScope)
			return err
		}); err != nil {
			return nil, err
		}
		if err := holdEnd.window(ctx, rdb, idle, c.Workers, func(ctx context.Context, i int) error { return e.cl.releaseHold(ctx, bigScope, holds[i]) }); err != nil {
			return nil, err
		}
	}
	// cold routes: the idle pods taken first by sessions that stay, then each cycle's
	// routes lead Cold deploys; the cycle's sessions end and its pods are purged after
	for i := range idle * pc {
		if err := e.cl.route(ctx, bigScope, fmt.Sprintf("f%d", i)); err != nil {
			return nil, err
		}
	}
	for cycle := 0; coldRoute.ops < c.Ops; cycle++ {
		before, err := rdb.ZRange(ctx, store.Keys().Scope(bigScope).Pods, 0, -1).Result()
		if err != nil {
			return nil, err
		}
		n := cold * pc
		sess := func(i int) string { return fmt.Sprintf("c%d-%d", cycle, i) }
		if err := coldRoute.window(ctx, rdb, n, 1, func(ctx context.Context, i int) error { return e.cl.route(ctx, bigScope, sess(i)) }); err != nil {
			return nil, err
		}
		for i := range n {
			_ = e.cl.endSession(ctx, bigScope, sess(i)) // a route that failed bound nothing
		}
		if err := purgeNew(ctx, rdb, store, before); err != nil {
			return nil, err
		}
	}
	row := &BigScopeRow{Pods: pods, PodConcurrency: pc, Ops: []OpRow{warm.row(opWarmRoute), release.row(opRelease),
		acquire.row(opAcquire), holdEnd.row(opHoldEnd), coldRoute.row(opColdRoute)}}
	for _, o := range row.Ops {
		sc.logf("  %-12s %5d ops  %6.1f commands  %6.1f us Redis CPU  p50 %.2f ms  p99 %.2f ms  %d errors %s  top: %v",
			o.Name, o.Ops, o.Commands, o.RedisUs, o.P50Ms, o.P99Ms, o.Errors, o.FirstError, o.Top)
	}
	return row, nil
}

// fillScope writes pods pods of the scope's deploy_ver straight into Redis, each busy
// pod holding pc sessions and the last idle ones none, and has scope_repair.lua recount
// them (and build whatever the scripts derive from them): a fill through routes would
// cost O(pods²) on scripts that scan the scope.
func fillScope(ctx context.Context, rdb *redis.Client, store *redisstore.Store, pods, idle, pc int) error {
	k := store.Keys().Scope(bigScope)
	ver, err := rdb.HGet(ctx, k.Config, "deploy_ver").Result()
	if err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	pipe := rdb.Pipeline()
	for i := range pods {
		fence := int64(i + 1)
		id := warmpool.PodName(bigScope, fence)
		info, err := json.Marshal(warmpool.Pod{ID: id, ScopeID: bigScope, DeployVer: ver, Fence: fence, SSEURL: "http://127.0.0.1:1/" + id})
		if err != nil {
			return err
		}
		at := float64(now - int64(pods) + int64(i))
		pipe.ZAdd(ctx, k.Pods, redis.Z{Score: at, Member: id})
		pipe.HSet(ctx, k.PodVer, id, ver)
		pipe.HSet(ctx, k.PodInfo, id, info)
		if i >= pods-idle {
			pipe.HSet(ctx, k.Slots, id, 0)
			pipe.ZAdd(ctx, k.Idle, redis.Z{Score: at, Member: id})
		} else {
			pipe.HSet(ctx, k.Slots, id, pc)
			for j := range pc {
				sid := "p" + strconv.Itoa(i) + "-" + strconv.Itoa(j)
				pipe.HSet(ctx, k.Sessions, sid, id)
				pipe.ZAdd(ctx, k.SessExp, redis.Z{Score: float64(now + 86_400_000), Member: sid})
			}
		}
		if pipe.Len() > 5_000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return err
	}
	if err := store.FenceRaise(ctx, bigScope, int64(pods+1)); err != nil {
		return err
	}
	t := time.Now()
	if _, err = store.ScopeRepair(ctx, bigScope, t, t.Add(time.Minute), true); err != nil {
		return err
	}
	// the recount read every session into Lua: its garbage (and Lua's string table,
	// grown to hold it) would be charged to the windows that follow
	return rdb.Eval(ctx, "collectgarbage('collect') return 0", nil).Err()
}

// purgeNew purges the scope's pods that are not in before.
func purgeNew(ctx context.Context, rdb *redis.Client, store *redisstore.Store, before []string) error {
	now, err := rdb.ZRange(ctx, store.Keys().Scope(bigScope).Pods, 0, -1).Result()
	if err != nil {
		return err
	}
	for _, pod := range now {
		if !slices.Contains(before, pod) {
			if _, err := store.PodPurge(ctx, bigScope, pod, "bench", nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// hold is what an acquire handed out.
type hold struct {
	Pod  string `json:"pod_id"`
	Hold string `json:"hold_id"`
}

func (c *client) endSession(ctx context.Context, scope, session string) error {
	return c.do(ctx, http.MethodDelete, "/v1/scopes/"+scope+"/sessions/"+session, nil)
}

func (c *client) acquire(ctx context.Context, scope string) (hold, error) {
	var h hold
	err := c.post(ctx, "/v1/scopes/"+scope+"/pods/acquire", struct{}{}, &h)
	return h, err
}

func (c *client) releaseHold(ctx context.Context, scope string, h hold) error {
	return c.do(ctx, http.MethodPost, "/v1/scopes/"+scope+"/pods/"+h.Pod+"/release", map[string]string{"hold_id": h.Hold})
}
