package bench

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/sweeper"
)

// ClusterRun is the warm routes of the capacity run on a Redis Cluster: Replicas
// replicas route the same population as the one-shard run, flat out and at a fixed
// rate, and each master's CPU and commands are read from its own INFO.
type ClusterRun struct {
	Started  time.Time `json:"started"`
	Replicas int       `json:"replicas"`
	Scopes   int       `json:"scopes"`
	Sessions int       `json:"sessions_per_scope"`
	// IdleSeconds is the length of the idle window, whose rates are taken off.
	IdleSeconds float64          `json:"idle_seconds"`
	Nodes       []*ClusterNode   `json:"nodes"`
	Windows     []*ClusterWindow `json:"windows"`
}

// ClusterNode is one master of the run.
type ClusterNode struct {
	Addr  string `json:"addr"`
	Slots int    `json:"slots"`
	// Predicted: the scopes whose hash tag's slot (CLUSTER KEYSLOT) the master serves
	// (CLUSTER SLOTS); Found: the scopes' config keys SCAN finds on it.
	Predicted int `json:"scopes_predicted"`
	Found     int `json:"scopes_found"`
	// Globals are the keys on it that belong to no scope (due index shards, probe
	// windows, the epoch), by family, and the sweeper jobs' lock keys whose slots it
	// serves (a lock lives only while its job runs, so it is found by its slot).
	Globals map[string]int `json:"globals"`
	// PredictedShare is its share of the scopes; IdleCPUPS its CPU seconds a second in
	// the idle window (the cluster bus and the sweep ticks whose keys it holds).
	PredictedShare float64 `json:"predicted_share"`
	IdleCPUPS      float64 `json:"idle_cpu_per_s"`
}

// ClusterWindow is one window of warm routes on the Cluster.
type ClusterWindow struct {
	Rate    float64    `json:"rate"`
	Seconds float64    `json:"seconds"`
	LoadAvg string     `json:"load_avg"`
	Route   RouteStats `json:"route"`
	// ReplicaUs and RedisUs: the replicas' and every master's CPU per route, net of
	// their idle rate.
	ReplicaUs float64       `json:"replica_cpu_us_per_route"`
	RedisUs   float64       `json:"redis_cpu_us_per_route"`
	Nodes     []*NodeWindow `json:"nodes"`
}

// NodeWindow is one master in a window: Routes are its EVALSHA calls less the idle
// window's rate (one per warm route of a scope it holds), RedisCPU its CPU seconds net
// of its idle rate, RedisUs the two's ratio, Share its share of the routes.
type NodeWindow struct {
	Routes   float64 `json:"routes"`
	RedisCPU float64 `json:"redis_cpu_s"`
	RedisUs  float64 `json:"redis_cpu_us_per_route"`
	Share    float64 `json:"share"`
}

// clusterEnv is a throwaway Redis Cluster and the replicas on it.
type clusterEnv struct {
	script, dir string
	nodes       []*redis.Client
	addrs       []string
	cc          *redis.ClusterClient
	replicas    []*process
	cls         []*client
}

func startCluster(ctx context.Context, script, dir string) (*clusterEnv, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out, err := exec.CommandContext(ctx, script, "start", dir).Output()
	if err != nil {
		return nil, fmt.Errorf("%s start: %w", script, exitText(err))
	}
	e := &clusterEnv{script: script, dir: dir, addrs: strings.Split(strings.TrimSpace(string(out)), ",")}
	for _, a := range e.addrs {
		e.nodes = append(e.nodes, redis.NewClient(&redis.Options{Addr: a}))
	}
	e.cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: e.addrs})
	return e, nil
}

func (e *clusterEnv) stop() {
	for _, p := range e.replicas {
		p.stop()
	}
	for _, n := range e.nodes {
		n.Close()
	}
	if e.cc != nil {
		_ = e.cc.Close() // the Cluster is stopped next: nothing to do about a failed close
	}
	_ = exec.Command(e.script, "stop", e.dir).Run()
}

// startReplicas starts n replicas on the Cluster with the fake driver, one config
// store and one fake pod directory between them.
func (e *clusterEnv) startReplicas(ctx context.Context, bin string, n, conns int, extra ...string) error {
	url := "redis+cluster://" + strings.Join(e.addrs, ",")
	for i := range n {
		name := fmt.Sprintf("replica%d", i+1)
		args := append([]string{"serve", "--listen", "127.0.0.1:0", "--redis", url, "--store", filepath.Join(e.dir, "config.db"),
			"--driver", "fake", "--fake-state-dir", filepath.Join(e.dir, "pods"), "--instance-id", name,
			"--log-level", "warn", "--log-format", "text"}, extra...)
		p, err := startProcess(ctx, bin, args, filepath.Join(e.dir, name+".log"), "/readyz")
		if err != nil {
			return err
		}
		e.replicas = append(e.replicas, p)
		e.cls = append(e.cls, newClient(p.URL, conns))
	}
	return nil
}

// clusterSample is every master's INFO and the replicas' CPU at one end of a window.
type clusterSample struct {
	at         time.Time
	nodes      []redisStats
	replicaCPU time.Duration
}

func (e *clusterEnv) take(ctx context.Context) (clusterSample, error) {
	s := clusterSample{}
	for _, n := range e.nodes {
		st, err := readRedis(ctx, n)
		if err != nil {
			return s, err
		}
		s.nodes = append(s.nodes, st)
	}
	for _, p := range e.replicas {
		cpu, err := procCPU(p.PID)
		if err != nil {
			return s, err
		}
		s.replicaCPU += cpu
	}
	s.at = time.Now()
	return s, nil
}

// spread fills each node's slots, the scopes its slots predict, the scopes' config keys
// and the keys of no scope found on it.
func (e *clusterEnv) spread(ctx context.Context, p Population, nodes []*ClusterNode) error {
	shards, err := e.cc.ClusterShards(ctx).Result()
	if err != nil {
		return err
	}
	owner := make([]int, 16384)
	for _, sh := range shards {
		i := -1
		for _, n := range sh.Nodes {
			if n.Role == "master" {
				i = slices.Index(e.addrs, net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)))
			}
		}
		if i < 0 {
			return fmt.Errorf("CLUSTER SHARDS names no master among %v", e.addrs)
		}
		for _, r := range sh.Slots {
			nodes[i].Slots += int(r.End - r.Start + 1)
			for s := r.Start; s <= r.End; s++ {
				owner[s] = i
			}
		}
	}
	keys := redisstore.NewKeyspace("")
	for i := range p.Scopes {
		slot, err := e.nodes[0].ClusterKeySlot(ctx, "{"+p.scope(i)+"}").Result()
		if err != nil {
			return err
		}
		nodes[owner[slot]].Predicted++
	}
	scopeKey := keys.Prefix() + "{"
	for i, n := range e.nodes {
		nodes[i].Globals = map[string]int{}
		iter := n.Scan(ctx, 0, keys.Prefix()+"*", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			if rest, ok := strings.CutPrefix(k, scopeKey+p.Prefix); ok {
				if strings.HasSuffix(rest, "}:config") {
					nodes[i].Found++
				}
				continue
			}
			if !strings.HasPrefix(k, scopeKey) {
				nodes[i].Globals[keyFamily(strings.TrimPrefix(k, keys.Prefix()))]++
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
	}
	for shard := range redisstore.DueShards {
		for _, job := range []string{sweeper.DueJobName(shard), sweeper.WatchJobName(shard)} {
			slot, err := e.nodes[0].ClusterKeySlot(ctx, keys.Lock("sweep:"+job)).Result()
			if err != nil {
				return err
			}
			nodes[owner[slot]].Globals["lock:sweep:"+strings.TrimRight(job, "0123456789:")]++
		}
	}
	return nil
}

// keyFamily names a key of no scope by what it is: "lock:sweep:due" for
// lock:sweep:due:7, "due" for due:{7}, "epoch" for epoch.
func keyFamily(k string) string {
	if i := strings.IndexByte(k, '{'); i > 0 {
		return strings.TrimSuffix(k[:i], ":")
	}
	if i := strings.LastIndexByte(k, ':'); i > 0 && strings.Trim(k[i+1:], "0123456789") == "" {
		return k[:i]
	}
	return k
}

// cluster runs the Cluster measurement: the warm population stored and bound through
// the first replica, an idle window, then warm routes through every replica at once,
// flat out and at Rate.
func (c *CapacityConfig) cluster(ctx context.Context) (*ClusterRun, error) {
	sc := c.scale()
	sc.logf("Cluster: 3 masters (%s), %d replicas", c.ClusterScript, c.Replicas)
	e, err := startCluster(ctx, c.ClusterScript, filepath.Join(c.Dir, "cluster"))
	if err != nil {
		return nil, err
	}
	defer e.stop()
	if err := e.startReplicas(ctx, c.Bin, c.Replicas, c.Workers+8, "--reconcile-interval", "1h", "--claim-ttl", capacityClaimTTL.String()); err != nil {
		return nil, err
	}
	p := c.warm()
	p.Prefix = "cl-"
	if err := e.cls[0].putConfigs(ctx, p, c.Workers); err != nil {
		return nil, fmt.Errorf("configs: %w", err)
	}
	if err := e.cls[0].routeAll(ctx, p, c.Workers); err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	if _, err := settleDue(ctx, e.cc, DefaultSettleHorizon); err != nil {
		return nil, err
	}
	cr := &ClusterRun{Started: time.Now().UTC(), Replicas: c.Replicas, Scopes: p.Scopes, Sessions: p.Sessions}
	for _, a := range e.addrs {
		cr.Nodes = append(cr.Nodes, &ClusterNode{Addr: a})
	}
	if err := e.spread(ctx, p, cr.Nodes); err != nil {
		return nil, err
	}
	s0, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	if err := wait(ctx, c.Window); err != nil {
		return nil, err
	}
	s1, err := e.take(ctx)
	if err != nil {
		return nil, err
	}
	cr.idle(s0, s1)
	for _, rate := range []float64{0, c.Rate} {
		w := &ClusterWindow{Rate: rate}
		a, err := e.take(ctx)
		if err != nil {
			return nil, err
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, cl := range e.cls {
			wg.Go(func() {
				st := cl.routeLoad(ctx, p, c.Window, rate/float64(len(e.cls)), max(1, c.Workers/len(e.cls)))
				mu.Lock()
				w.Route.add(st)
				mu.Unlock()
			})
		}
		wg.Wait()
		b, err := e.take(ctx)
		if err != nil {
			return nil, err
		}
		w.LoadAvg = loadAvg()
		if w.Route.Errors > 0 {
			return cr, fmt.Errorf("%d routes failed, the first: %s", w.Route.Errors, w.Route.FirstError)
		}
		cr.window(w, s0, s1, a, b)
		cr.Windows = append(cr.Windows, w)
		sc.logf("  routes %s: %d in %.1fs through %d replicas: Redis %.1f µs, replicas %.1f µs per route; load %s",
			rateText(rate), w.Route.Routes, w.Seconds, c.Replicas, w.RedisUs, w.ReplicaUs, w.LoadAvg)
		if c.Rate <= 0 {
			break
		}
	}
	return cr, nil
}

// idle computes the masters' idle rates from the samples around the idle window.
func (cr *ClusterRun) idle(s0, s1 clusterSample) {
	cr.IdleSeconds = s1.at.Sub(s0.at).Seconds()
	for i, n := range cr.Nodes {
		n.IdleCPUPS = (s1.nodes[i].CPU - s0.nodes[i].CPU).Seconds() / cr.IdleSeconds
		n.PredictedShare = float64(n.Predicted) / float64(cr.Scopes)
	}
}

// window computes w's figures from the samples around it (a, b), less the idle
// window's (s0, s1) rates.
func (cr *ClusterRun) window(w *ClusterWindow, s0, s1, a, b clusterSample) {
	w.Seconds = b.at.Sub(a.at).Seconds()
	idle := func(d0, d1 float64) float64 { return (d1 - d0) / cr.IdleSeconds * w.Seconds }
	var redisCPU, total float64
	for i, n := range cr.Nodes {
		i0, i1, x, y := s0.nodes[i], s1.nodes[i], a.nodes[i], b.nodes[i]
		nw := &NodeWindow{
			RedisCPU: (y.CPU - x.CPU).Seconds() - n.IdleCPUPS*w.Seconds,
			Routes:   float64(y.Calls["evalsha"]-x.Calls["evalsha"]) - idle(float64(i0.Calls["evalsha"]), float64(i1.Calls["evalsha"])),
		}
		if nw.Routes > 0 {
			nw.RedisUs = 1e6 * nw.RedisCPU / nw.Routes
		}
		redisCPU += nw.RedisCPU
		total += nw.Routes
		w.Nodes = append(w.Nodes, nw)
	}
	for _, nw := range w.Nodes {
		if total > 0 {
			nw.Share = nw.Routes / total
		}
	}
	if routes := float64(w.Route.Routes); routes > 0 {
		w.RedisUs = 1e6 * redisCPU / routes
		w.ReplicaUs = 1e6 * ((b.replicaCPU - a.replicaCPU).Seconds() - idle(s0.replicaCPU.Seconds(), s1.replicaCPU.Seconds())) / routes
	}
}

// MaxShare is the hottest master's share of the routes.
func (w *ClusterWindow) MaxShare() float64 {
	m := 0.0
	for _, n := range w.Nodes {
		m = max(m, n.Share)
	}
	return m
}

func (cr *ClusterRun) writeText(w *strings.Builder, m CapacityModel, costs []OpCost) {
	fmt.Fprintf(w, "\nRedis Cluster, 3 masters, %d replicas, %d scopes × %d sessions, %s\n\n", cr.Replicas, cr.Scopes, cr.Sessions, cr.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintln(w, "| master | slots | scopes predicted / found (share) | idle CPU ms/s | keys of no scope (locks: by slot) |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, n := range cr.Nodes {
		fmt.Fprintf(w, "| %s | %d | %d / %d (%.3f) | %.1f | %s |\n", n.Addr, n.Slots, n.Predicted, n.Found, n.PredictedShare, 1000*n.IdleCPUPS, families(n.Globals))
	}
	fmt.Fprintln(w, "\n| routes | routes/s | p50 / p99 ms | master | share of routes (of scopes) | EVALSHA (net) | Redis CPU s (net) | Redis CPU µs per route | load avg |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, x := range cr.Windows {
		for i, nw := range x.Nodes {
			fmt.Fprintf(w, "| %s | %.0f | %.2f / %.2f | %s | %.3f (%.3f) | %.0f | %.2f | %.1f | %s |\n", rateText(x.Rate), float64(x.Route.Routes)/x.Seconds,
				x.Route.P50Ms, x.Route.P99Ms, cr.Nodes[i].Addr, nw.Share, cr.Nodes[i].PredictedShare, nw.Routes, nw.RedisCPU, nw.RedisUs, x.LoadAvg)
		}
		fmt.Fprintf(w, "| %s | | | all | | %d routes | | %.1f (replicas %.1f) | |\n", rateText(x.Rate), x.Route.Routes, x.RedisUs, x.ReplicaUs)
		name := opWarm
		if x.Rate > 0 {
			name = warmAt(x.Rate / clusterMasters)
		}
		for _, c := range costs {
			if c.Name == name {
				fmt.Fprintf(w, "| one shard: %s | | | | | | | %.1f (replica %.1f) | %s |\n", name, c.RedisUs, c.ReplicaUs, c.LoadAvg)
			}
		}
	}
	if len(cr.Windows) > 0 && m.Warm.RedisUs > 0 {
		x := cr.Windows[0]
		fmt.Fprintf(w, "\nThe model with the one-shard figure: this Cluster carries %.0f warm routes/s (the hottest master takes %.3f of them)\n", m.ClusterRoutes(0, x.MaxShare()), x.MaxShare())
	}
}

func rateText(r float64) string {
	if r <= 0 {
		return "flat out"
	}
	return fmt.Sprintf("at %.0f/s", r)
}

// families lists m's counts by name: "due 6, epoch 1".
func families(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
