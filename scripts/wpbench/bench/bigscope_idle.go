package bench

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// Defaults of the idle scope's measurement.
const (
	DefaultIdlePods   = 10_000
	DefaultIdleWindow = time.Minute
	// idleSettle outlasts the orphan grace: the watch looks each new pod up once (one
	// ZSCORE, PodKnown) that long after the driver reported it, which a window closer
	// to the fill counts as the idle scope's cost (10,000 lookups a minute).
	idleSettle      = sweeper.DefaultOrphanGrace + 15*time.Second
	idleFillWorkers = 32
)

// IdleRow is an idle scope of Pods warm pods on the fake driver, sweeps, the watch
// and its probes at their defaults and nothing routed: what it costs Redis (commands
// a second, those scripts run included; Redis CPU as a share of a core) and the
// replica (its CPU as a share of a core) over Seconds, a window after the replica's
// first full pass; the pass (hourly; its recount of every pod's slots on the first
// and every tenth) is measured on its own, PassCommands beyond the window's rate.
type IdleRow struct {
	PassCommands float64       `json:"first_pass_commands"`
	PassSeconds  float64       `json:"first_pass_wait_seconds"`
	Pods         int           `json:"pods"`
	Seconds      float64       `json:"seconds"`
	CommandsPerS float64       `json:"redis_commands_per_s"`
	RedisCore    float64       `json:"redis_core_share"`
	ReplicaCore  float64       `json:"replica_core_share"`
	Top          []CommandTime `json:"top_commands"`
	// Busiest are the commands run most, a second (scripts' own commands included).
	Busiest     []CommandCount `json:"busiest_commands"`
	FillSeconds float64        `json:"fill_seconds"`
}

// CommandCount is how often Redis ran a command, a second.
type CommandCount struct {
	Command string  `json:"command"`
	PerS    float64 `json:"per_s"`
}

// idle fills one scope with c.IdlePods pods through routes (each leads a deploy at
// pod_concurrency 1), ends every session, waits until every pod is idle and a settle
// time has passed, then measures one window of c.IdleWindow in which nothing calls.
func (c *BigScopeConfig) idle(ctx context.Context) (*IdleRow, error) {
	sc := c.scale()
	name := fmt.Sprintf("idle-%d", c.IdlePods)
	sc.logf("%s: %d warm pods, sweeps at their defaults, a window of %v", name, c.IdlePods, c.IdleWindow)
	e, err := sc.start(ctx, name, "--fake-deploy-delay", "0s")
	if err != nil {
		return nil, err
	}
	defer e.stop()
	if err := e.cl.setupCall(ctx, http.MethodPut, "/v1/scopes/"+bigScope+"/config", bigConfig(c.IdlePods, 1)); err != nil {
		return nil, err
	}
	start := time.Now()
	if err := c.fillIdle(ctx, e); err != nil {
		return nil, err
	}
	row := &IdleRow{Pods: c.IdlePods, FillSeconds: time.Since(start).Seconds()}
	sc.logf("  %d pods idle in %.0fs; settling %v", c.IdlePods, row.FillSeconds, idleSettle)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(idleSettle):
	}
	p, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	if err := e.awaitPass(ctx); err != nil {
		return nil, err
	}
	a, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(c.IdleWindow):
	}
	b, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	secs := b.at.Sub(a.at).Seconds()
	cmds := commands(b.redis) - commands(a.redis)
	var top []CommandTime
	var busiest []CommandCount
	for cmd, v := range b.redis.Calls {
		if cmd == "info" {
			continue
		}
		if n := v - a.redis.Calls[cmd]; n > 0 {
			busiest = append(busiest, CommandCount{Command: cmd, PerS: float64(n) / secs})
		}
		if us := b.redis.Usec[cmd] - a.redis.Usec[cmd]; us > 0 {
			top = append(top, CommandTime{Command: cmd, Us: float64(us) / secs})
		}
	}
	sort.Slice(top, func(i, j int) bool { return top[i].Us > top[j].Us })
	row.Seconds = secs
	row.CommandsPerS = float64(cmds) / secs
	row.PassSeconds = a.at.Sub(p.at).Seconds()
	row.PassCommands = float64(commands(a.redis)-commands(p.redis)) - row.CommandsPerS*row.PassSeconds
	row.RedisCore = (b.redis.CPU - a.redis.CPU).Seconds() / secs
	row.ReplicaCore = (b.cpu - a.cpu).Seconds() / secs
	row.Top = top[:min(len(top), 6)]
	sort.Slice(busiest, func(i, j int) bool { return busiest[i].PerS > busiest[j].PerS })
	row.Busiest = busiest[:min(len(busiest), 10)]
	sc.logf("  the first full pass: %.0f commands beyond the idle rate, in a wait of %.0fs", row.PassCommands, row.PassSeconds)
	sc.logf("  %.1f Redis commands/s, Redis %.2f%% of a core, replica %.2f%% of a core, top (us/s): %v, busiest (/s): %v",
		row.CommandsPerS, 100*row.RedisCore, 100*row.ReplicaCore, row.Top, row.Busiest)
	return row, nil
}

// awaitPass waits until the replica has run its first full pass (the reconcile job,
// whose first tick comes a 1/n share of its hour after the start, n the replica's
// jobs; the run at the start, the rebuild of the fresh Redis, is the count's first),
// so that a window after it holds the replica's steady cost.
func (e *env) awaitPass(ctx context.Context) error {
	deadline := time.Now().Add(sweeper.DefaultReconcile)
	for {
		if err := e.scrapeMetrics(ctx); err != nil {
			return err
		}
		if e.metrics.sum("warmpool_sweeper_runs_total", `sweep="reconcile"`, `outcome="ok"`) >= 2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no full pass ran within %v", sweeper.DefaultReconcile)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// commands is how many commands Redis ran, INFO left out.
func commands(st redisStats) int64 {
	var n int64
	for cmd, v := range st.Calls {
		if cmd != "info" {
			n += v
		}
	}
	return n
}

// fillIdle routes c.IdlePods new sessions (a pod each: none ends before all are
// routed), then ends them, and waits until the scope has that many idle pods.
func (c *BigScopeConfig) fillIdle(ctx context.Context, e *env) error {
	tr := &http.Transport{MaxIdleConnsPerHost: idleFillWorkers, DisableCompression: true}
	hc := &http.Client{Transport: tr, Timeout: time.Minute}
	defer tr.CloseIdleConnections()
	route := func(session string) error {
		code, err := routeStatus(ctx, hc, e.replica.URL, bigScope, session)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("route %s: %d", session, code)
		}
		return err
	}
	end := func(session string) error { return e.cl.endSession(ctx, bigScope, session) }
	for _, op := range []func(string) error{route, end} {
		if err := c.eachSession(op); err != nil {
			return err
		}
	}
	idle := redisstore.NewKeyspace("").Scope(bigScope).Idle
	for {
		n, err := e.redis.rdb.ZCard(ctx, idle).Result()
		if err != nil {
			return err
		}
		if int(n) >= c.IdlePods {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// eachSession calls op on the sessions of the idle scope from idleFillWorkers
// goroutines and returns the first error.
func (c *BigScopeConfig) eachSession(op func(session string) error) error {
	next := make(chan int)
	errs := make(chan error, idleFillWorkers)
	var wg sync.WaitGroup
	for range idleFillWorkers {
		wg.Go(func() {
			var first error
			for i := range next {
				if err := op(fmt.Sprintf("i%d", i)); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		})
	}
	for i := range c.IdlePods {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
