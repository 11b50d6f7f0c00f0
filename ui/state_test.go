package ui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/ui"
)

// state is an answer of GET /v1/ui/state, the fields the tests read.
type state struct {
	InstanceID  string                `json:"instance_id"`
	SummaryBy   string                `json:"summary_by"`
	Totals      ui.Totals             `json:"totals"`
	Filter      string                `json:"filter"`
	Sort        string                `json:"sort"`
	Offset      int                   `json:"offset"`
	Limit       int                   `json:"limit"`
	Matched     int                   `json:"matched"`
	Rows        []ui.Row              `json:"rows"`
	Tenants     []warmpool.TenantView `json:"tenants"`
	MoreTenants bool                  `json:"more_tenants"`
	Scopes      []struct {
		ScopeID string        `json:"scope_id"`
		Tenant  string        `json:"tenant"`
		MaxPods int           `json:"max_pods"`
		Pods    []ui.PodState `json:"pods"`
		Backoff ui.Backoff    `json:"backoff"`
	} `json:"scopes"`
}

func (s state) rowIDs() []string {
	ids := make([]string, 0, len(s.Rows))
	for _, r := range s.Rows {
		ids = append(ids, r.ScopeID)
	}
	return ids
}

// passes counts the passes over every scope a client makes: its pipelines that run
// scope_summary.lua (the tests' scopes fit one), not those that found a Redis server
// without the script, which the store loads and runs again. It counts every command
// too, and the round trips: each command sent alone, each pipeline.
type passes struct{ n, cmds, trips atomic.Int64 }

func (p *passes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *passes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		p.cmds.Add(1)
		p.trips.Add(1)
		return next(ctx, cmd)
	}
}
func (p *passes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	sha := redisstore.Scripts["scope_summary.lua"].Hash()
	return func(ctx context.Context, cmds []redis.Cmder) error {
		p.cmds.Add(int64(len(cmds)))
		p.trips.Add(1)
		err := next(ctx, cmds)
		pass := false
		for _, c := range cmds {
			if a := c.Args(); len(a) > 1 && strings.EqualFold(fmt.Sprint(a[0]), "evalsha") && a[1] == sha {
				if c.Err() != nil && strings.HasPrefix(c.Err().Error(), "NOSCRIPT") {
					return err
				}
				pass = true
			}
		}
		if pass {
			p.n.Add(1)
		}
		return err
	}
}

// replica is one replica under test, with a clock the test moves.
type replica struct {
	ts     *httptest.Server
	passes *passes
}

// newReplica serves a replica named id on b, with its own Redis client (whose
// passes it counts) and clock.
func newReplica(t *testing.T, b *testserver.Backing, id string, clock warmpool.Clock) *replica {
	t.Helper()
	rdb := b.Redis.NewClient(t)
	p := &passes{}
	rdb.AddHook(p)
	cfg := b.Config(id)
	cfg.Redis, cfg.Clock = rdb, clock
	_, ts := testserver.Serve(t, cfg)
	return &replica{ts: ts, passes: p}
}

// get sends GET path and returns the status and the body.
func get(t *testing.T, base, path string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// uiState sends GET /v1/ui/state?query, which must answer 200.
func uiState(t *testing.T, base, query string) state {
	t.Helper()
	code, b := get(t, base, "/v1/ui/state?"+query)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/ui/state?%s: %d %s", query, code, b)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// twoReplicas is two replicas on the backing b and one clock, with the scopes a, b and
// c put through the first.
func twoReplicas(t *testing.T) (b *testserver.Backing, r1, r2 *replica, clock *testredis.Clock) {
	t.Helper()
	b = testserver.NewBacking(t)
	clock = testredis.NewClock()
	r1, r2 = newReplica(t, b, "r1", clock), newReplica(t, b, "r2", clock)
	for _, s := range []string{"a", "b", "c"} {
		putScope(t, r1.ts.URL, s)
	}
	return b, r1, r2, clock
}

// putScope stores a scope of max_pods 2 and pod_concurrency 2.
func putScope(t *testing.T, base, scope string) {
	t.Helper()
	call(t, http.MethodPut, base+"/v1/scopes/"+scope+"/config", `{"pool":{"max_concurrency":4,"pod_concurrency":2}}`, nil)
}

func route(t *testing.T, base, scope, session string) string {
	t.Helper()
	var b struct {
		PodID string `json:"pod_id"`
	}
	call(t, http.MethodPost, base+"/v1/scopes/"+scope+"/sessions", `{"session_id":"`+session+`"}`, &b)
	return b.PodID
}

// The rows are a page of every scope's summary, filtered, sorted and cut by the
// parameters, with totals over every scope; details come for the scopes named.
func TestStatePageFilterSort(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	r := newReplica(t, b, "r1", testredis.NewClock())
	var all []string
	for i := range 25 {
		all = append(all, fmt.Sprintf("a-%02d", i))
	}
	all = append(all, "b-0", "b-1")
	for _, s := range all {
		putScope(t, r.ts.URL, s)
	}
	// a-07: three sessions on two pods; b-1: two on one; a-03: one.
	for scope, n := range map[string]int{"a-07": 3, "b-1": 2, "a-03": 1} {
		for i := range n {
			route(t, r.ts.URL, scope, fmt.Sprint("s", i))
		}
	}

	st := uiState(t, r.ts.URL, "")
	if !slices.Equal(st.rowIDs(), all[:ui.DefaultLimit]) || st.Matched != 27 || st.Offset != 0 || st.Limit != ui.DefaultLimit || st.Sort != "scope_id" {
		t.Fatalf("first page: rows %v, matched %d, offset %d, limit %d, sort %q", st.rowIDs(), st.Matched, st.Offset, st.Limit, st.Sort)
	}
	want := ui.Totals{Scopes: 27, Pods: 4, Busy: 4, MaxPods: 54, Sessions: 6}
	if st.Totals != want || len(st.Scopes) != 0 {
		t.Fatalf("totals %+v, want %+v; details %v, want none", st.Totals, want, st.Scopes)
	}
	if row := st.Rows[7]; row.ScopeID != "a-07" || row.Pods != 2 || row.Busy != 2 || row.Sessions != 3 || row.MaxPods != 2 || row.PodConcurrency != 2 || row.Version != 1 {
		t.Fatalf("row of a-07: %+v", row)
	}
	for _, c := range []struct {
		query string
		rows  []string
		match int
	}{
		{"offset=20", all[20:], 27},
		{"offset=20&limit=3", all[20:23], 27},
		{"offset=27", []string{}, 27},
		{"filter=B-", []string{"b-0", "b-1"}, 2},
		{"filter=a-1&limit=3&offset=9", []string{"a-19"}, 10},
		{"filter=zz", []string{}, 0},
		{"sort=-sessions&limit=3", []string{"a-07", "b-1", "a-03"}, 27},
		{"sort=-pods&limit=3", []string{"a-07", "a-03", "b-1"}, 27},
		{"sort=sessions&limit=2&offset=24", []string{"a-03", "b-1"}, 27},
		{"sort=-scope_id&limit=2", []string{"b-1", "b-0"}, 27},
		{"sort=-busy&filter=b", []string{"b-1", "b-0"}, 2},
	} {
		st := uiState(t, r.ts.URL, c.query)
		if !slices.Equal(st.rowIDs(), c.rows) || st.Matched != c.match || st.Totals != want {
			t.Errorf("%s: rows %v (matched %d, totals %+v), want %v (matched %d)", c.query, st.rowIDs(), st.Matched, st.Totals, c.rows, c.match)
		}
	}
	if st := uiState(t, r.ts.URL, "filter=B-"); st.Filter != "b-" {
		t.Errorf("filter answered %q, want it in lower case", st.Filter)
	}

	st = uiState(t, r.ts.URL, "detail=b-1,a-07,nosuch,b-1")
	if len(st.Scopes) != 2 || st.Scopes[0].ScopeID != "b-1" || st.Scopes[1].ScopeID != "a-07" ||
		len(st.Scopes[0].Pods) != 1 || len(st.Scopes[1].Pods) != 2 || st.Scopes[1].MaxPods != 2 {
		t.Fatalf("details: %+v, want b-1 (one pod) and a-07 (two), in the order named", st.Scopes)
	}
}

// A bad parameter is a 400 VALIDATION naming it, in the error envelope.
func TestStateBadParameters(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	r := newReplica(t, b, "r1", testredis.NewClock())
	putScope(t, r.ts.URL, "a")
	many := make([]string, ui.MaxDetail+1)
	for i := range many {
		many[i] = fmt.Sprint("s", i)
	}
	for _, c := range []struct{ query, param string }{
		{"limit=0", "limit"}, {"limit=501", "limit"}, {"limit=-1", "limit"}, {"limit=ten", "limit"}, {"limit=", "limit"},
		{"limit=1.5", "limit"}, {"limit=1&limit=2", "limit"}, {"limit=99999999999999999999", "limit"},
		{"offset=-1", "offset"}, {"offset=x", "offset"}, {"offset=", "offset"}, {"offset=1&offset=1", "offset"},
		{"sort=nope", "sort"}, {"sort=--pods", "sort"}, {"sort=", "sort"}, {"sort=+pods", "sort"}, {"sort=Pods", "sort"},
		{"filter=a/b", "filter"}, {"filter=%20a", "filter"}, {"filter=" + strings.Repeat("a", 64), "filter"}, {"filter=a&filter=b", "filter"},
		{"detail=A", "detail"}, {"detail=a,,b", "detail"}, {"detail=a,", "detail"}, {"detail=" + strings.Join(many, ","), "detail"},
		{"detail=a&detail=b", "detail"},
		{"page=2", "page"}, {"limit=5&Limit=5", "Limit"},
	} {
		code, body := get(t, r.ts.URL, "/v1/ui/state?"+c.query)
		var env struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(body, &env); err != nil || code != http.StatusBadRequest || env.Error.Code != string(warmpool.CodeValidation) ||
			!strings.HasPrefix(env.Error.Message, c.param+": ") {
			t.Errorf("%s: %d %s, want 400 VALIDATION naming %s", c.query, code, body, c.param)
		}
	}
	if st := uiState(t, r.ts.URL, "limit=500&offset=0&sort=-old_pods&filter=&detail="); st.Limit != 500 || len(st.Rows) != 1 {
		t.Errorf("the largest page and empty filter and detail: %+v", st)
	}
}

// A replica reads every scope at most once a refresh interval, however many requests
// ask, at once or one after the other; another replica takes the pass it shared in
// Redis for that long instead of reading every scope itself.
func TestStateSharedWork(t *testing.T) {
	t.Parallel()
	b, r1, r2, clock := twoReplicas(t)
	count := func(when string, want1, want2 int64) {
		t.Helper()
		if n1, n2 := r1.passes.n.Load(), r2.passes.n.Load(); n1 != want1 || n2 != want2 {
			t.Fatalf("%s: %d and %d passes, want %d and %d", when, n1, n2, want1, want2)
		}
	}
	if st := uiState(t, r1.ts.URL, ""); st.Totals.Scopes != 3 || st.SummaryBy != "r1" {
		t.Fatalf("first answer: %+v", st)
	}
	count("the first request", 1, 0)
	putScope(t, r1.ts.URL, "d")
	if st := uiState(t, r1.ts.URL, "filter=a&detail=d"); st.Totals.Scopes != 3 || len(st.Scopes) != 1 {
		t.Fatalf("a second request in the interval: %+v, want the first pass's 3 scopes and d's details", st)
	}
	count("a second request in the interval", 1, 0)
	cmds := r1.passes.cmds.Load()
	uiState(t, r1.ts.URL, "sort=-pods")
	if n := r1.passes.cmds.Load() - cmds; n != 0 {
		t.Fatalf("a third request in the interval, without details, sent %d Redis commands, want none", n)
	}
	if st := uiState(t, r2.ts.URL, ""); st.Totals.Scopes != 3 || st.SummaryBy != "r1" || st.InstanceID != "r2" {
		t.Fatalf("the other replica in the interval: %+v, want r1's pass", st)
	}
	count("the other replica in the interval", 1, 0)

	clock.Advance(ui.Refresh - 1)
	uiState(t, r1.ts.URL, "")
	count("just before the interval ends", 1, 0)
	clock.Advance(1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if st := uiState(t, r1.ts.URL, ""); st.Totals.Scopes != 4 {
				t.Errorf("after the interval: %d scopes, want 4", st.Totals.Scopes)
			}
		})
	}
	wg.Wait()
	count("8 requests at once after the interval", 2, 0)
	uiState(t, r2.ts.URL, "")
	count("the other replica after", 2, 0)

	// r2's own pass, once r1's has aged: r1 then takes r2's.
	clock.Advance(ui.Refresh)
	if st := uiState(t, r2.ts.URL, ""); st.SummaryBy != "r2" {
		t.Fatalf("r2 after another interval: summary by %q", st.SummaryBy)
	}
	if st := uiState(t, r1.ts.URL, ""); st.SummaryBy != "r2" {
		t.Fatalf("r1 then: summary by %q", st.SummaryBy)
	}
	count("one more interval", 2, 1)

	// While another replica reads every scope (it holds the pass lock), the last pass
	// serves for a second interval, and no longer.
	store := redisstore.NewStore(b.Redis.Client, b.Redis.Prefix)
	lock, err := store.Obtain(context.Background(), store.Keys().Lock(ui.PassLock), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(ui.Refresh)
	if st := uiState(t, r1.ts.URL, ""); st.SummaryBy != "r2" {
		t.Fatalf("r1 while another replica reads, the last pass an interval old: summary by %q, want r2's", st.SummaryBy)
	}
	count("while another replica reads", 2, 1)
	clock.Advance(ui.Refresh)
	if st := uiState(t, r1.ts.URL, ""); st.SummaryBy != "r1" {
		t.Fatalf("r1 while another replica reads, the last pass two intervals old: summary by %q, want its own", st.SummaryBy)
	}
	count("while another replica reads, for long", 3, 1)
	if err := lock.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A scope's details are its pool as GET …/pool answers it, and its row counts the
// same pods and sessions.
func TestStateDetailMatchesPool(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	clock := testredis.NewClock()
	r := newReplica(t, b, "r1", clock)
	putScope(t, r.ts.URL, "m")
	p0 := route(t, r.ts.URL, "m", "s0")
	route(t, r.ts.URL, "m", "s1")
	route(t, r.ts.URL, "m", "s2")
	call(t, http.MethodDelete, r.ts.URL+"/v1/scopes/m/sessions/s0", "", nil)
	call(t, http.MethodDelete, r.ts.URL+"/v1/scopes/m/sessions/s1", "", nil)

	var pool struct {
		Pods []struct {
			PodID    string `json:"pod_id"`
			State    string `json:"state"`
			Sessions int    `json:"sessions"`
		} `json:"pods"`
	}
	call(t, http.MethodGet, r.ts.URL+"/v1/scopes/m/pool", "", &pool)
	st := uiState(t, r.ts.URL, "detail=m")
	if len(st.Scopes) != 1 || len(st.Scopes[0].Pods) != len(pool.Pods) || len(pool.Pods) != 2 {
		t.Fatalf("details %+v, pool %+v: want the same two pods", st.Scopes, pool)
	}
	idle := 0
	for i, p := range st.Scopes[0].Pods {
		q := pool.Pods[i]
		if p.PodID != q.PodID || p.State != q.State || p.Sessions != q.Sessions || !p.Current {
			t.Errorf("pod %d: detail %+v, pool %+v", i, p, q)
		}
		if p.State == "idle" {
			idle++
			if p.PodID != p0 || p.IdleSince == nil {
				t.Errorf("idle pod %+v, want %s with its idle_since", p, p0)
			}
		}
	}
	if row := st.Rows[0]; idle != 1 || row.Pods != 2 || row.Idle != 1 || row.Busy != 1 || row.Sessions != 1 {
		t.Errorf("row %+v, want 2 pods, 1 idle, 1 session", row)
	}
}

// A scope's details name its tenant: the one its config names, else the scope itself.
func TestStateDetailNamesTenant(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	r := newReplica(t, b, "r1", testredis.NewClock())
	call(t, http.MethodPut, r.ts.URL+"/v1/scopes/shop/config", `{"tenant":"acme","pool":{"max_concurrency":4,"pod_concurrency":2}}`, nil)
	putScope(t, r.ts.URL, "solo")
	st := uiState(t, r.ts.URL, "detail=shop,solo")
	if len(st.Scopes) != 2 || st.Scopes[0].Tenant != "acme" || st.Scopes[1].Tenant != "solo" {
		t.Fatalf("details %+v: want shop of tenant acme, solo of its own", st.Scopes)
	}
}

// putTenantScope stores a scope of max_pods 2 and pod_concurrency 2 that counts
// against tenant.
func putTenantScope(t *testing.T, base, scope, tenant string) {
	t.Helper()
	call(t, http.MethodPut, base+"/v1/scopes/"+scope+"/config", `{"tenant":"`+tenant+`","pool":{"max_concurrency":4,"pod_concurrency":2}}`, nil)
}

// tenantIDs are the ids of the tenants of an answer.
func (s state) tenantIDs() []string {
	ids := make([]string, 0, len(s.Tenants))
	for _, t := range s.Tenants {
		ids = append(ids, t.TenantID)
	}
	return ids
}

// The tenants with quotas come with their quotas (one left out: none), what their
// scopes use and their share; a tenant without quotas is left out. A replica reads
// them at most once a Refresh, in round trips that do not grow with their scopes.
func TestStateTenants(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	clock := testredis.NewClock()
	r := newReplica(t, b, "r1", clock)
	call(t, http.MethodPut, r.ts.URL+"/v1/tenants/acme", `{"max_pods":3,"max_sessions":5,"max_cpu":"2","weight":3}`, nil)
	call(t, http.MethodPut, r.ts.URL+"/v1/tenants/open", `{}`, nil)
	putTenantScope(t, r.ts.URL, "shop", "acme")
	putTenantScope(t, r.ts.URL, "lab", "open")
	putScope(t, r.ts.URL, "solo")
	route(t, r.ts.URL, "shop", "s0")
	route(t, r.ts.URL, "shop", "s1")

	st := uiState(t, r.ts.URL, "")
	if !slices.Equal(st.tenantIDs(), []string{"acme", "open"}) || st.MoreTenants {
		t.Fatalf("tenants %v (more: %v), want acme and open, no more", st.tenantIDs(), st.MoreTenants)
	}
	acme, open := st.Tenants[0], st.Tenants[1]
	if c := acme.Config; c.MaxPods == nil || *c.MaxPods != 3 || c.MaxSessions == nil || *c.MaxSessions != 5 || c.MaxCPU == nil || *c.MaxCPU != "2" ||
		c.MaxMemory != nil || c.MaxIdlePods != nil || c.Weight != 3 {
		t.Errorf("acme's quotas %+v: want max_pods 3, max_sessions 5, max_cpu 2, weight 3, no other", c)
	}
	if u := acme.Use; u.Pods != 1 || u.Sessions != 2 || u.IdlePods != 0 || acme.Share != 0.75 {
		t.Errorf("acme uses %+v, share %v: want one pod, two sessions, share 0.75", u, acme.Share)
	}
	if c := open.Config; c.MaxPods != nil || c.MaxCPU != nil || c.MaxMemory != nil || c.MaxSessions != nil || c.MaxIdlePods != nil || c.Weight != 1 {
		t.Errorf("open's quotas %+v: want none, weight 1", c)
	}
	if u := open.Use; u.Pods != 0 || u.Sessions != 0 || open.Share != 0.25 {
		t.Errorf("open uses %+v, share %v: want nothing, share 0.25", u, open.Share)
	}

	// In the interval, the tenants are not read again: a tenant put then shows after.
	call(t, http.MethodPut, r.ts.URL+"/v1/tenants/new", `{"max_pods":1}`, nil)
	cmds := r.passes.cmds.Load()
	if st := uiState(t, r.ts.URL, ""); !slices.Equal(st.tenantIDs(), []string{"acme", "open"}) {
		t.Fatalf("tenants in the interval: %v, want the first answer's", st.tenantIDs())
	}
	if n := r.passes.cmds.Load() - cmds; n != 0 {
		t.Fatalf("a second request in the interval sent %d Redis commands, want none", n)
	}
	refresh := func() (state, int64) {
		t.Helper()
		clock.Advance(ui.Refresh)
		trips := r.passes.trips.Load()
		st := uiState(t, r.ts.URL, "")
		return st, r.passes.trips.Load() - trips
	}
	st, trips := refresh()
	if !slices.Equal(st.tenantIDs(), []string{"acme", "new", "open"}) || st.Tenants[0].Share != 0.6 {
		t.Fatalf("tenants after the interval: %v (acme's share %v), want acme, new, open (0.6)", st.tenantIDs(), st.Tenants[0].Share)
	}

	// Three more scopes of acme, one with a pod: the tenant's use counts it, in as
	// many round trips as before.
	for _, s := range []string{"shop-2", "shop-3", "shop-4"} {
		putTenantScope(t, r.ts.URL, s, "acme")
	}
	route(t, r.ts.URL, "shop-2", "s0")
	st, more := refresh()
	if u := st.Tenants[0].Use; u.Pods != 2 || u.Sessions != 3 {
		t.Fatalf("acme with more scopes uses %+v, want two pods, three sessions", u)
	}
	if more != trips {
		t.Fatalf("a refresh took %d Redis round trips with acme's three more scopes, %d before: want as many", more, trips)
	}
}

// The tenants panel holds the first ui.MaxTenants tenants with quotas by id, and says
// when more have quotas.
func TestStateTenantsBounded(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	clock := testredis.NewClock()
	r := newReplica(t, b, "r1", clock)
	put := func(i int) {
		t.Helper()
		call(t, http.MethodPut, fmt.Sprintf("%s/v1/tenants/t-%03d", r.ts.URL, i), `{"max_pods":2}`, nil)
	}
	for i := range ui.MaxTenants {
		put(i)
	}
	if st := uiState(t, r.ts.URL, ""); len(st.Tenants) != ui.MaxTenants || st.MoreTenants {
		t.Fatalf("%d tenants with quotas: %d shown (more: %v), want every one and no more", ui.MaxTenants, len(st.Tenants), st.MoreTenants)
	}
	put(ui.MaxTenants)
	clock.Advance(ui.Refresh)
	st := uiState(t, r.ts.URL, "")
	ids := st.tenantIDs()
	if len(ids) != ui.MaxTenants || !st.MoreTenants || ids[0] != "t-000" || ids[len(ids)-1] != fmt.Sprintf("t-%03d", ui.MaxTenants-1) {
		t.Fatalf("%d tenants with quotas: %d shown, %v (more: %v), want the first %d and more", ui.MaxTenants+1, len(ids), ids, st.MoreTenants, ui.MaxTenants)
	}
}

// failRoute routes a session of scope while the driver fails the next deploy: the
// route answers 502 DEPLOY_FAILED and the scope's refill backoff starts.
func failRoute(t *testing.T, b *testserver.Backing, base, scope, session string) {
	t.Helper()
	b.Fake.FailNext(1, "image pull failed: agent:broken")
	resp, err := http.Post(base+"/v1/scopes/"+scope+"/sessions", "application/json", strings.NewReader(`{"session_id":"`+session+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("route with a failing deploy: %d %s, want 502", resp.StatusCode, body)
	}
}

// A scope's details show its refill backoff (SPEC §11.3) as GET …/pool does: the
// failures in a row, until when, and the last error; none without one.
func TestStateDetailShowsBackoff(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	r := newReplica(t, b, "r1", testredis.NewClock())
	putScope(t, r.ts.URL, "m")
	if st := uiState(t, r.ts.URL, "detail=m"); len(st.Scopes) != 1 || st.Scopes[0].Backoff.Failures != 0 || st.Scopes[0].Backoff.Until != nil {
		t.Fatalf("details before a failure %+v, want no backoff", st.Scopes)
	}
	failRoute(t, b, r.ts.URL, "m", "s0")
	var pool struct {
		Backoff ui.Backoff `json:"backoff"`
	}
	call(t, http.MethodGet, r.ts.URL+"/v1/scopes/m/pool", "", &pool)
	st := uiState(t, r.ts.URL, "detail=m")
	if len(st.Scopes) != 1 {
		t.Fatalf("details %+v, want scope m", st.Scopes)
	}
	got, want := st.Scopes[0].Backoff, pool.Backoff
	if got.Failures != 1 || got.Until == nil || want.Until == nil || !got.Until.Equal(*want.Until) ||
		got.LastError != want.LastError || !strings.Contains(got.LastError, "agent:broken") {
		t.Fatalf("backoff in the details %+v, in the pool %+v: want one failure with its reason, the same", got, want)
	}
}

// GET /v1/scopes takes a pass up to ui.ListAge old, on any replica, so that callers
// paging through every scope cost Redis one pass every ListAge; a pool page's request
// wants one less than a Refresh old and makes it, and the scope list of its replica
// takes that one from then on.
func TestScopeListTakesOlderPasses(t *testing.T) {
	t.Parallel()
	_, r1, r2, clock := twoReplicas(t)
	list := func(base string) int {
		t.Helper()
		code, body := get(t, base, "/v1/scopes?limit=2")
		var page struct {
			Scopes []struct{} `json:"scopes"`
			Next   *string    `json:"next"`
		}
		if err := json.Unmarshal(body, &page); code != http.StatusOK || err != nil || page.Next == nil {
			t.Fatalf("GET /v1/scopes?limit=2: %d %s", code, body)
		}
		code, body = get(t, base, "/v1/scopes?after="+*page.Next)
		var rest struct {
			Scopes []struct{} `json:"scopes"`
		}
		if err := json.Unmarshal(body, &rest); code != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/scopes?after=%s: %d %s", *page.Next, code, body)
		}
		return len(page.Scopes) + len(rest.Scopes)
	}
	count := func(when string, want1, want2 int64) {
		t.Helper()
		if n1, n2 := r1.passes.n.Load(), r2.passes.n.Load(); n1 != want1 || n2 != want2 {
			t.Fatalf("%s: %d and %d passes, want %d and %d", when, n1, n2, want1, want2)
		}
	}
	if n := list(r1.ts.URL); n != 3 {
		t.Fatalf("the first list: %d scopes", n)
	}
	count("the first list", 1, 0)
	putScope(t, r1.ts.URL, "d")
	clock.Advance(ui.ListAge - 1)
	if n1, n2 := list(r1.ts.URL), list(r2.ts.URL); n1 != 3 || n2 != 3 {
		t.Fatalf("lists just before ListAge: %d and %d scopes, want the first pass's 3", n1, n2)
	}
	count("lists just before ListAge, on both replicas", 1, 0)
	if st := uiState(t, r2.ts.URL, ""); st.Totals.Scopes != 4 || st.SummaryBy != "r2" {
		t.Fatalf("a pool page then: %+v, want a pass of its own", st)
	}
	count("a pool page", 1, 1)
	if n1, n2 := list(r1.ts.URL), list(r2.ts.URL); n1 != 3 || n2 != 4 {
		t.Fatalf("lists after the page's pass: %d and %d scopes, want r1's pass's 3 and the page's 4", n1, n2)
	}
	count("lists after the page's pass", 1, 1)
	clock.Advance(ui.ListAge)
	if n := list(r1.ts.URL); n != 4 {
		t.Fatalf("a list after ListAge: %d scopes", n)
	}
	count("a list after ListAge", 2, 1)
}
