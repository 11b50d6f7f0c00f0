// Package replicatest runs "N replicas on one Redis" for the tests of rm, sm and
// sweeper: one Redis (internal/testing/testredis), one fake pod driver, one controllable clock,
// the scopes published on them, and replicas that each have their own Redis client,
// redisstore.Store, rm.Manager, sm.Manager and (with a config store) sweeper.Sweeper. It
// checks the SPEC §6 invariants (internal/testing/invariant) against every deploy_ver a scope
// has had. It imports no Kubernetes package, so the tests that use it do not either.
package replicatest

import (
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/scopes"
	"github.com/warmpool/warmpool/sm"
	"github.com/warmpool/warmpool/sweeper"
)

// Wait bounds every wait of the helpers here; only a failing test waits this long.
const Wait = 10 * time.Second

// Harness is the shared backing of a test's replicas.
type Harness struct {
	TB    testing.TB
	Redis *testredis.Redis
	// Store is the test's own view of the Redis (its own client, no replica's).
	Store *redisstore.Store
	// Fake is the pod driver of every replica that names no other.
	Fake *fake.Driver
	// Clock is a controllable clock; replicas run on it when Config.Clock says so.
	Clock *testredis.Clock
	// Configs and Scopes are nil unless the harness was made WithConfigs.
	Configs warmpool.ConfigStore
	Scopes  *scopes.Service

	mu       sync.Mutex
	current  map[string]warmpool.StoredConfig
	versions map[string][]string                      // every deploy_ver published for a scope, oldest first
	pools    map[string]map[int64]warmpool.PoolConfig // every version's pool config

	// checkMu makes Check's snapshots and checks one sequence, in order.
	checkMu sync.Mutex
	checks  map[string]*invariant.Capacity
}

// Option shapes a Harness.
type Option func(*Harness)

// WithConfigs keeps scope configs in store: Scope puts them through the config service
// (stored, then published), and every replica gets a sweeper over the store.
func WithConfigs(store warmpool.ConfigStore) Option {
	return func(h *Harness) { h.Configs = store }
}

// New returns a harness on a fresh Redis with a live keyspace; everything it starts
// ends with the test.
func New(tb testing.TB, opts ...Option) *Harness {
	tb.Helper()
	r := testredis.New(tb)
	h := &Harness{
		TB: tb, Redis: r, Store: redisstore.NewStore(r.Client, r.Prefix), Fake: fake.New(), Clock: testredis.NewClock(),
		current: map[string]warmpool.StoredConfig{}, versions: map[string][]string{},
		pools: map[string]map[int64]warmpool.PoolConfig{}, checks: map[string]*invariant.Capacity{},
	}
	for _, o := range opts {
		o(h)
	}
	if h.Configs != nil {
		pods := rm.New(h.Store, h.Fake, rm.Config{Clock: h.Clock})
		tb.Cleanup(pods.Close)
		h.Scopes = scopes.New(h.Configs, h.Store, pods, nil, nil)
	}
	tb.Cleanup(func() { _ = h.Fake.Close() })
	if _, err := h.Store.Bootstrap(context.Background(), "e1"); err != nil {
		tb.Fatal(err)
	}
	return h
}

// ScopeConfig is the scope config tests start from: every default, max_concurrency mc,
// pod_concurrency pc, a 10s ready timeout, then mutate; normalized.
func ScopeConfig(tb testing.TB, mc, pc int, mutate ...func(*warmpool.ScopeConfig)) warmpool.ScopeConfig {
	tb.Helper()
	cfg := warmpool.DefaultScopeConfig()
	cfg.Pool.MaxConcurrency, cfg.Pool.PodConcurrency = mc, pc
	cfg.Deploy.ReadyTimeoutS = 10
	for _, f := range mutate {
		f(&cfg)
	}
	if err := cfg.Normalize(); err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// Scope publishes the next version of a scope made by ScopeConfig(mc, pc, mutate...):
// through the config service when the harness has a config store, else straight to
// Redis. It returns the version as stored.
func (h *Harness) Scope(id string, mc, pc int, mutate ...func(*warmpool.ScopeConfig)) warmpool.StoredConfig {
	h.TB.Helper()
	cfg := ScopeConfig(h.TB, mc, pc, mutate...)
	ctx := context.Background()
	if h.Scopes != nil {
		stored, err := h.Scopes.Put(ctx, id, cfg)
		if err != nil {
			h.TB.Fatalf("put %s: %v", id, err)
		}
		h.track(stored)
		return stored
	}
	h.mu.Lock()
	stored := warmpool.StoredConfig{ScopeID: id, Version: h.current[id].Version + 1, DeployVer: cfg.Deploy.DeployVer(), Config: cfg}
	h.mu.Unlock()
	if err := h.Store.ScopePublish(ctx, redisstore.ScopeRecord{ScopeID: id, Config: cfg, Version: stored.Version, DeployVer: stored.DeployVer, ChangedAt: stored.UpdatedAt}); err != nil {
		h.TB.Fatalf("publish %s: %v", id, err)
	}
	h.track(stored)
	return stored
}

func (h *Harness) track(stored warmpool.StoredConfig) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.current[stored.ScopeID] = stored
	if h.pools[stored.ScopeID] == nil {
		h.pools[stored.ScopeID] = map[int64]warmpool.PoolConfig{}
	}
	h.pools[stored.ScopeID][stored.Version] = stored.Config.Pool
	if v := h.versions[stored.ScopeID]; len(v) == 0 || v[len(v)-1] != stored.DeployVer {
		h.versions[stored.ScopeID] = append(v, stored.DeployVer)
	}
}

// Current is the latest version of a scope published through Scope.
func (h *Harness) Current(scope string) warmpool.StoredConfig {
	h.TB.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.current[scope]
	if !ok {
		h.TB.Fatalf("scope %s was never published", scope)
	}
	return c
}

// Config shapes one replica; zero fields take each part's defaults.
type Config struct {
	RM      rm.Config
	SM      sm.Config
	Sweeper sweeper.Config
	// Clock, when set, is the clock of every part (Harness.Clock, typically).
	Clock warmpool.Clock
	// Driver, when set, replaces the harness's fake driver for this replica.
	Driver warmpool.PodDriver
	// Pool, when set, wraps the replica's rm.Manager as its sm.Manager's pool (to
	// interpose on Acquire).
	Pool func(warmpool.Pool) warmpool.Pool
}

// Replica is one replica's parts on the harness's Redis.
type Replica struct {
	// Client is the replica's own connection to Redis (own pool, own subscriptions).
	Client redis.UniversalClient
	Store  *redisstore.Store
	RM     *rm.Manager
	SM     *sm.Manager
	// Sweeper is nil unless the harness has a config store.
	Sweeper *sweeper.Sweeper
}

// Replica starts one replica. It is stopped with the test: the fake driver fails its
// held deploys first, then the managers close.
func (h *Harness) Replica(cfg Config) *Replica {
	h.TB.Helper()
	if cfg.Clock != nil {
		cfg.RM.Clock, cfg.SM.Clock, cfg.Sweeper.Clock = cfg.Clock, cfg.Clock, cfg.Clock
	}
	driver := cfg.Driver
	if driver == nil {
		driver = h.Fake
	}
	client := h.Redis.NewClient(h.TB)
	r := &Replica{Client: client, Store: redisstore.NewStore(client, h.Redis.Prefix)}
	r.RM = rm.New(r.Store, driver, cfg.RM)
	var pool warmpool.Pool = r.RM
	if cfg.Pool != nil {
		pool = cfg.Pool(pool)
	}
	r.SM = sm.New(r.Store, pool, cfg.SM)
	if h.Configs != nil {
		r.Sweeper = sweeper.New(r.Store, r.RM, r.SM, driver, h.Configs, cfg.Sweeper)
	}
	h.TB.Cleanup(func() {
		_ = h.Fake.Close()
		r.SM.Close()
		r.RM.Close()
	})
	return r
}

// Snap is a consistent snapshot of a scope.
func (h *Harness) Snap(scope string) redisstore.Snapshot {
	h.TB.Helper()
	s, err := h.Store.Snapshot(context.Background(), scope)
	if err != nil {
		h.TB.Fatal(err)
	}
	return s
}

// violations lists the SPEC §6 invariants a snapshot of scope breaks, the next of the
// sequence c follows: invariants 1 and 2 against the config of every version the
// snapshot may have been under (a lowered pod_concurrency or max_pods lets what was
// placed before drain, see invariant.Capacity), the others as invariant.Violations
// checks them; sessions may sit on a pod of any deploy_ver the scope had (tests that
// change versions assert invariant 6 for new sessions themselves). With settled, work
// in flight and leftovers are violations too.
func (h *Harness) violations(scope string, s redisstore.Snapshot, settled bool, c *invariant.Capacity) []string {
	h.mu.Lock()
	pools, vers := maps.Clone(h.pools[scope]), slices.Clone(h.versions[scope])
	h.mu.Unlock()
	return c.Violations(s, pools, vers, settled)
}

// Check fails the test (without stopping it) for every invariant a snapshot of scope
// breaks, and returns the snapshot. The snapshots of Check are one sequence: a pod
// over a lowered pod_concurrency must not gain a slot from one Check to the next.
func (h *Harness) Check(scope string, settled bool) redisstore.Snapshot {
	h.TB.Helper()
	h.checkMu.Lock()
	defer h.checkMu.Unlock()
	c := h.checks[scope]
	if c == nil {
		c = &invariant.Capacity{}
		h.checks[scope] = c
	}
	s := h.Snap(scope)
	for _, v := range h.violations(scope, s, settled, c) {
		h.TB.Errorf("%s: %s", scope, v)
	}
	return s
}

// Settled checks every invariant of a scope with no work in flight.
func (h *Harness) Settled(scope string) redisstore.Snapshot {
	h.TB.Helper()
	return h.Check(scope, true)
}

// Watch checks the scopes' invariants on consistent snapshots over and over until
// Stop, so that a violation that lasts only a moment is seen too. Its snapshots are a
// sequence of their own.
func (h *Harness) Watch(scopes ...string) *invariant.Watcher {
	checks := map[string]*invariant.Capacity{}
	return invariant.Watch(h.Store, func(scope string, s redisstore.Snapshot) []string {
		c := checks[scope]
		if c == nil {
			c = &invariant.Capacity{}
			checks[scope] = c
		}
		return h.violations(scope, s, false, c)
	}, scopes...)
}

// WaitInFlight waits until n deploys are in flight in the fake driver.
func (h *Harness) WaitInFlight(n int) {
	h.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	if err := h.Fake.WaitInFlight(ctx, n); err != nil {
		h.TB.Fatal(err)
	}
}

// WaitFor polls cond until it holds, failing the test after Wait. The poll interval
// is not synchronisation: cond reads the state it waits for.
func WaitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(Wait)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Recv takes a value from ch, failing the test after Wait.
func Recv[T any](tb testing.TB, what string, ch <-chan T) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(Wait):
		tb.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
