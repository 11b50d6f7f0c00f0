package sm_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/invariant"
	"github.com/warmpool/warmpool/internal/testredis"
	"github.com/warmpool/warmpool/k8s/fakepod"
	"github.com/warmpool/warmpool/lua"
	"github.com/warmpool/warmpool/rm"
	"github.com/warmpool/warmpool/sm"
)

// go-redis ends its pub/sub goroutines on Close, so the whole package is checked for
// leaked goroutines (the wake-up subscriptions of every replica included).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// harness is one Redis, one fake pod driver and the scopes published on them.
// Replicas made from it share the Redis but each has its own client (own connections,
// own wake-up subscriptions), its own rm.Manager and its own sm.Manager.
type harness struct {
	t     *testing.T
	r     *testredis.Redis
	store *lua.Store
	fake  *fakepod.Driver

	mu       sync.Mutex
	cfgs     map[string]warmpool.ScopeConfig
	versions map[string][]string // every deploy_ver published for a scope, oldest first
	version  map[string]int64
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	r := testredis.New(t)
	h := &harness{
		t: t, r: r, store: lua.NewStore(r.Client, r.Prefix), fake: fakepod.New(),
		cfgs: map[string]warmpool.ScopeConfig{}, versions: map[string][]string{}, version: map[string]int64{},
	}
	t.Cleanup(func() { h.fake.Close() })
	if _, err := h.store.Bootstrap(context.Background(), "e1"); err != nil {
		t.Fatal(err)
	}
	return h
}

// scope publishes (a new version of) a scope with max_concurrency mc and
// pod_concurrency pc; mutate adjusts the rest.
func (h *harness) scope(id string, mc, pc int, mutate ...func(*warmpool.ScopeConfig)) warmpool.ScopeConfig {
	h.t.Helper()
	cfg := testredis.ScopeConfig(h.t, mc, pc, mutate...)
	h.mu.Lock()
	h.version[id]++
	ver := h.version[id]
	h.cfgs[id] = cfg
	if dv := cfg.Deploy.DeployVer(); len(h.versions[id]) == 0 || h.versions[id][len(h.versions[id])-1] != dv {
		h.versions[id] = append(h.versions[id], dv)
	}
	h.mu.Unlock()
	if err := h.store.ScopePublish(context.Background(), lua.ScopeRecord{ScopeID: id, Config: cfg, Version: ver, DeployVer: cfg.Deploy.DeployVer()}); err != nil {
		h.t.Fatal(err)
	}
	return cfg
}

// client is a new client of the harness's Redis, as another replica would have.
func (h *harness) client() redis.UniversalClient {
	h.t.Helper()
	return h.r.NewClient(h.t)
}

// replicaOpts shape one replica.
type replicaOpts struct {
	sm    sm.Config
	clock warmpool.Clock // for both managers; nil = wall clock
	// wrap, when set, wraps the replica's pool (to interpose on Acquire).
	wrap func(warmpool.Pool) warmpool.Pool
}

// replica starts one replica: its own Redis client, rm.Manager and sm.Manager.
func (h *harness) replica(o replicaOpts) *sm.Manager {
	h.t.Helper()
	store := lua.NewStore(h.client(), h.r.Prefix)
	if o.clock != nil {
		o.sm.Clock = o.clock
	}
	pool := rm.New(store, h.fake, rm.Config{Clock: o.clock})
	var p warmpool.Pool = pool
	if o.wrap != nil {
		p = o.wrap(p)
	}
	m := sm.New(store, p, o.sm)
	h.t.Cleanup(func() {
		m.Close()
		pool.Close()
	})
	return m
}

func (h *harness) snap(scope string) lua.Snapshot {
	h.t.Helper()
	s, err := h.store.Snapshot(context.Background(), scope)
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

// violations checks the SPEC §6 invariants on a snapshot of scope; sessions may sit on
// a pod of any deploy_ver the scope had (invariant 6 for new sessions is asserted by
// the tests that change versions).
func (h *harness) violations(s lua.Snapshot, scope string, settled bool) []string {
	h.mu.Lock()
	cfg, vers := h.cfgs[scope], append([]string(nil), h.versions[scope]...)
	h.mu.Unlock()
	return invariant.Violations(s, cfg, vers, settled)
}

// settled checks every invariant of a scope with no work in flight.
func (h *harness) settled(scope string) lua.Snapshot {
	h.t.Helper()
	s := h.snap(scope)
	for _, v := range h.violations(s, scope, true) {
		h.t.Error(v)
	}
	return s
}

// podSessions counts the sessions on each pod of a snapshot.
func podSessions(s lua.Snapshot) map[string]int {
	n := map[string]int{}
	for _, pod := range s.Sessions {
		n[pod]++
	}
	return n
}

type routed struct {
	b    sm.Binding
	err  error
	took time.Duration
}

// routeAsync routes in the background; the outcome arrives on the channel.
func routeAsync(m *sm.Manager, scope, session, requestID string) <-chan routed {
	ch := make(chan routed, 1)
	go func() {
		start := time.Now()
		b, err := m.Route(context.Background(), scope, session, requestID)
		ch <- routed{b, err, time.Since(start)}
	}()
	return ch
}

// await takes the outcome of a background route, failing the test after limit.
func await(t *testing.T, ch <-chan routed, limit time.Duration) routed {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("route did not return within %s", limit)
		return routed{}
	}
}

func mustRoute(t *testing.T, m *sm.Manager, scope, session string) sm.Binding {
	t.Helper()
	b, err := m.Route(context.Background(), scope, session, "")
	if err != nil {
		t.Fatalf("route %s/%s: %v", scope, session, err)
	}
	return b
}

// waitFor polls cond until it holds, failing the test after 5 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// wantCode fails unless err carries code (and, for the 503 codes, a retry_after).
func wantCode(t *testing.T, what string, err error, code warmpool.Code) {
	t.Helper()
	if got := warmpool.ErrorCode(err); got != code {
		t.Fatalf("%s: error %v (code %s), want %s", what, err, got, code)
	}
	var e *warmpool.Error
	errors.As(err, &e)
	if code.Status() == 503 && e.RetryAfter < 1 {
		t.Fatalf("%s: %s without retry_after: %v", what, code, err)
	}
}
