package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// quotaEnv is an env whose scopes s1, s2 and s3 all name tenant acme, one session
// per pod, each pod requesting 500m.
func quotaEnv(t *testing.T, l warmpool.TenantLimits) *env {
	t.Helper()
	mutate := tenantScope("acme", 1)
	e := newEnv(t, mutate)
	for _, s := range []string{"s2", "s3"} {
		e.scope = s
		e.publish(mutate)
	}
	e.scope = "s1"
	e.limit(l)
	return e
}

// tenantScope is the config of quotaEnv's scopes: naming the tenant, pc sessions per
// pod, each pod requesting 500m.
func tenantScope(tenant string, pc int) func(*warmpool.ScopeConfig) {
	return func(c *warmpool.ScopeConfig) {
		c.Tenant, c.Deploy.Resources = tenant, warmpool.Resources{CPU: "500m"}
		c.Pool.PodConcurrency, c.Pool.MaxConcurrency = pc, 8
	}
}

// limit publishes acme's limits and balances its scopes, as a replica's feed does.
func (e *env) limit(l warmpool.TenantLimits) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.store.PublishTenant(ctx, "acme", l); err != nil {
		e.t.Fatal(err)
	}
	e.balance(l)
}

func (e *env) balance(l warmpool.TenantLimits) {
	e.t.Helper()
	if err := e.store.BalanceTenant(context.Background(), "acme", l); err != nil {
		e.t.Fatal(err)
	}
}

// quotaErr is the QUOTA_EXCEEDED error in err's chain, or nil.
func quotaErr(err error) *warmpool.Error {
	var e *warmpool.Error
	if errors.As(err, &e) && e.Code == warmpool.CodeQuotaExceeded {
		return e
	}
	return nil
}

// A tenant's pod quotas hold across its scopes: max_cpu of 1 core lets two pods of
// 500m lead deploys, in two scopes, and the third is refused with the quota's name,
// limit and use and a Retry-After; once a deploy ends, its allowance goes back at
// once and another scope may lead one.
func TestTenantQuotaPods(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.MilliCPU = 1000
	e := quotaEnv(t, l)
	ctx := context.Background()
	first := e.acquire("c1")
	e.scope = "s2"
	if res := e.acquire("c2"); res.Kind != redisstore.AcquireDeploy {
		t.Fatalf("s2's first acquire: %+v, want a deploy", res)
	}
	e.scope = "s3"
	_, err := e.store.PodAcquire(ctx, "s3", e.acquireArgs("c3"))
	q := quotaErr(err)
	if q == nil {
		t.Fatalf("a third pod of 500m under max_cpu 1: %v, want QUOTA_EXCEEDED", err)
	}
	d, _ := q.Details.(*warmpool.QuotaDetails)
	if d == nil || *d != (warmpool.QuotaDetails{Tenant: "acme", Quota: "max_cpu", Limit: "1", Use: "1"}) || q.RetryAfter < 1 {
		t.Fatalf("refusal %+v, details %+v: want acme's max_cpu, limit 1, use 1, Retry-After ≥ 1", q, q.Details)
	}

	e.scope = "s1"
	if _, err := e.store.DeployAbort(ctx, "s1", first.Deploy, first.Spec.DeployVer(), "gone", true, e.now, e.now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if res, err := e.store.PodAcquire(ctx, "s3", e.acquireArgs("c3")); err != nil || res.Kind != redisstore.AcquireDeploy {
		t.Fatalf("s3 after s1's deploy ended (its allowance back at once): %+v, %v, want a deploy", res, err)
	}
}

// A tenant's max_sessions holds across its scopes; an ended session's allowance comes
// back at the balance pass. Removing the quotas ends the governance.
func TestTenantQuotaSessions(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.Sessions = 2
	e := quotaEnv(t, l)
	ctx := context.Background()
	for _, s := range []string{"s3", "s2", "s1"} {
		e.scope = s
		e.onePod()
	}
	if res := e.route("a"); !res.Served() {
		t.Fatalf("route a: %+v", res)
	}
	e.scope = "s2"
	if res := e.route("b"); !res.Served() {
		t.Fatalf("route b: %+v", res)
	}
	e.scope = "s3"
	_, err := e.store.SessionRoute(ctx, "s3", redisstore.RouteArgs{Now: e.now, Session: "c"})
	q := quotaErr(err)
	if q == nil {
		t.Fatalf("a third session under max_sessions 2: %v, want QUOTA_EXCEEDED", err)
	}
	if d, _ := q.Details.(*warmpool.QuotaDetails); d == nil || d.Quota != "max_sessions" || d.Limit != int64(2) || d.Use != int64(2) {
		t.Fatalf("details %+v, want max_sessions 2 of 2", q.Details)
	}
	if res, err := e.store.SessionRoute(ctx, "s2", redisstore.RouteArgs{Now: e.now, Session: "b"}); err != nil || !res.Served() {
		t.Fatalf("a bound session's route is refused: %+v, %v", res, err)
	}
	if _, err := e.store.SessionEnd(ctx, "s1", "a", e.now); err != nil {
		t.Fatal(err)
	}
	e.balance(l)
	if res := e.route("c"); !res.Served() {
		t.Fatalf("route c after a ended: %+v", res)
	}
	e.limit(warmpool.Unlimited())
	e.scope = "s1"
	if res := e.route("d"); !res.Served() {
		t.Fatalf("route d without quotas: %+v", res)
	}
	esc, err := e.r.Client.HGetAll(ctx, e.store.Keys().TenantEscrow("acme")).Result()
	if err != nil || esc["sessions"] != "0" {
		t.Fatalf("escrow after the quotas went: %v, %v; want sessions 0", esc, err)
	}
}

// Concurrent acquires of three scopes against max_pods 5, with balance passes
// between them, never lead more than 5 deploys of the tenant, and the escrow never
// counts less than the scopes hold (SPEC §12.1: no tenant over a quota at any step).
// A pass may take back a grant before its caller used it (that caller is refused,
// under-admitted); after a last pass, acquires take what is left, and the tenant
// ends with exactly 5.
func TestTenantQuotaConcurrent(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.Pods = 5
	e := quotaEnv(t, l)
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	led, refused := 0, 0
	for i := range 24 {
		wg.Go(func() {
			scope := fmt.Sprintf("s%d", i%3+1)
			res, err := e.store.PodAcquire(ctx, scope, e.acquireArgs(fmt.Sprintf("c%d", i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case quotaErr(err) != nil || warmpool.ErrorCode(err) == warmpool.CodeNoPodAvailable:
				refused++
			case err != nil:
				t.Error(err)
			case res.Kind == redisstore.AcquireDeploy:
				led++
			default:
				t.Errorf("acquire %d: %+v", i, res)
			}
		})
		if i%6 == 0 {
			wg.Go(func() {
				if err := e.store.BalanceTenant(ctx, "acme", l); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	e.balance(l)
	for i := 0; led+refused < 40; i++ {
		res, err := e.store.PodAcquire(ctx, "s1", e.acquireArgs(fmt.Sprintf("late%d", i)))
		if quotaErr(err) != nil {
			break
		}
		if err != nil || res.Kind != redisstore.AcquireDeploy {
			t.Fatalf("late acquire: %+v, %v", res, err)
		}
		led++
	}
	held := int64(0)
	for _, s := range []string{"s1", "s2", "s3"} {
		n, err := e.r.Client.ZCard(ctx, e.store.Keys().Scope(s).Deploying).Result()
		if err != nil {
			t.Fatal(err)
		}
		held += n
	}
	esc, err := e.r.Client.HGet(ctx, e.store.Keys().TenantEscrow("acme"), "pods").Result()
	if err != nil {
		t.Fatal(err)
	}
	granted, _ := strconv.ParseInt(esc, 10, 64)
	if led != 5 || held != 5 || granted != 5 {
		t.Fatalf("led %d deploys (held %d, escrow %d), refused %d: want 5 led under max_pods 5 and the escrow at 5", led, held, granted, refused)
	}
}

// A route refused by the sessions quota keeps the claim it came with (its caller
// routes again with it once the escrow grants more, or gives it back: sm's pass
// releases the claim of a route that ends in an error); given back, the slot is free
// again and the pod idle (SPEC §6: a pod's slots are its sessions and live claims).
func TestTenantQuotaRefusalKeepsTheClaimForItsCaller(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.Sessions = 1
	e := quotaEnv(t, l)
	ctx := context.Background()
	e.onePod()
	if res := e.route("a"); !res.Served() {
		t.Fatalf("route a: %+v", res)
	}
	e.scope = "s2"
	pod := e.onePod()
	if res := e.acquire("c"); res.Kind != redisstore.AcquireWarm || res.Pod.ID != pod.ID {
		t.Fatalf("acquire: %+v, want s2's warm pod", res)
	}
	_, err := e.store.SessionRoute(ctx, "s2", redisstore.RouteArgs{Now: e.now, Session: "b", Claim: "c"})
	if quotaErr(err) == nil {
		t.Fatalf("route b with a claim over max_sessions 1: %v, want QUOTA_EXCEEDED", err)
	}
	k := e.store.Keys().Scope("s2")
	state := func() (string, bool, float64) {
		slots, _ := e.r.Client.HGet(ctx, k.Slots, pod.ID).Result()
		_, claimed := e.r.Client.HGet(ctx, k.ClaimPod, "c").Result()
		idle, _ := e.r.Client.ZScore(ctx, k.Idle, pod.ID).Result()
		return slots, claimed == nil, idle
	}
	if slots, kept, _ := state(); slots != "1" || !kept {
		t.Fatalf("after the refusal: slots %q, claim kept %v; want the claim's slot kept for the caller", slots, kept)
	}
	if _, _, err := e.store.ClaimRelease(ctx, "s2", "c", e.now); err != nil {
		t.Fatal(err)
	}
	if slots, kept, idle := state(); (slots != "" && slots != "0") || kept || idle == 0 {
		t.Fatalf("after the caller gave it back: slots %q, claim kept %v, idle since %v; want the claim gone and the pod idle", slots, kept, idle)
	}
}

// Far below its max_sessions a tenant's scopes keep the session allowance they took
// (a new session asks the escrow only at a new peak); past half of it, each balance
// pass takes back what they do not use.
func TestTenantSessionAllowanceKeptFarBelowQuota(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.Sessions = 100
	e := quotaEnv(t, l)
	ctx := context.Background()
	for _, sid := range []string{"a", "b"} {
		e.onePod()
		if res := e.route(sid); !res.Served() {
			t.Fatalf("route %s: %+v", sid, res)
		}
	}
	for _, sid := range []string{"a", "b"} {
		if _, err := e.store.SessionEnd(ctx, "s1", sid, e.now); err != nil {
			t.Fatal(err)
		}
	}
	allowance := func() string {
		t.Helper()
		v, err := e.r.Client.HGet(ctx, e.store.Keys().Scope("s1").Config, "q_sess").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	e.balance(l)
	if a := allowance(); a != "2" {
		t.Fatalf("s1's session allowance %s after a pass 2 of 100 granted, want its 2 kept", a)
	}
	l.Sessions = 3
	e.limit(l)
	if a := allowance(); a != "0" {
		t.Fatalf("s1's session allowance %s after a pass 2 of 3 granted, want 0 (taken back)", a)
	}
}

// A cold route of a scope that recycles its pods ("delete"), refused for want of
// session allowance, keeps the claim on the pod it deployed while the escrow grants
// more, and binds to it: before, the refusal freed the claim, the pod's last slot,
// which retired the pod, and every such route deployed again.
func TestTenantQuotaKeepsTheClaimOfARecyclingScope(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.Sessions = 4
	e := quotaEnv(t, l)
	e.publish(func(c *warmpool.ScopeConfig) {
		tenantScope("acme", 1)(c)
		c.Pool.Recycle = warmpool.RecycleDelete
	})
	e.balance(l)
	pod, _, err := e.register(e.acquire("c1"), "c1")
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.store.SessionRoute(context.Background(), "s1", redisstore.RouteArgs{Now: e.now, Session: "a", Claim: "c1"})
	if err != nil || !res.Served() || res.Pod.ID != pod.ID {
		t.Fatalf("route with the deploy's claim: %+v, %v, want bound to %s", res, err, pod.ID)
	}
}

// A pod adopted into a scope governed in pods (reconcile, the rebuild after a
// failover) is taken from the tenant's escrow, whatever the quota, since it runs
// already: with it counted, no deploy is granted over the quota beside it. Before, the
// adoption raised what the scope held and not the escrow, and a failover that lost a
// purge let a route deploy a pod over max_pods.
func TestTenantQuotaCountsAdoptedPods(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.Pods = 2
	e := quotaEnv(t, l)
	ctx := context.Background()
	first := e.onePod()
	e.scope = "s2"
	e.onePod()
	orphan := warmpool.Pod{ID: warmpool.PodName("s2", 90), ScopeID: "s2", DeployVer: first.DeployVer, Fence: 90, SSEURL: "http://x/sse"}
	if st, err := e.store.PodAdopt(ctx, orphan, e.now, false); err != nil || st != redisstore.AdoptAdopted {
		t.Fatalf("adopt: %q, %v", st, err)
	}
	esc, err := e.r.Client.HGet(ctx, e.store.Keys().TenantEscrow("acme"), "pods").Result()
	if err != nil || esc != "3" {
		t.Fatalf("acme's escrow counts %q pods (%v) after the adoption, want the 3 its scopes hold", esc, err)
	}
	e.scope = "s3"
	if _, err := e.store.PodAcquire(ctx, "s3", e.acquireArgs("c3")); quotaErr(err) == nil {
		t.Fatalf("a deploy beside the adopted pod, 3 of max_pods 2 held: %v, want QUOTA_EXCEEDED", err)
	}
}

// A scope that moves to another tenant takes what it holds with it: the new tenant's
// escrow counts its pods (its publish governs it afresh, as a new scope), so the new
// tenant's other scopes get no more than its quota leaves, and the old tenant's pass
// takes back what it had granted the scope.
func TestTenantQuotaFollowsAScopeThatMoves(t *testing.T) {
	t.Parallel()
	acme := warmpool.Unlimited()
	acme.Pods = 4
	e := quotaEnv(t, acme)
	ctx := context.Background()
	for _, c := range []string{"c1", "c2"} {
		if res := e.acquire(c); res.Kind != redisstore.AcquireDeploy {
			t.Fatalf("s1's acquire %s: %+v, want a deploy", c, res)
		}
	}
	beta := warmpool.Unlimited()
	beta.Pods = 2
	if err := e.store.PublishTenant(ctx, "beta", beta); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s3", "s1"} {
		e.scope = s
		e.publish(tenantScope("beta", 1))
	}
	if _, err := e.store.PodAcquire(ctx, "s3", e.acquireArgs("c3")); quotaErr(err) == nil {
		t.Fatalf("beta's s3 beside s1 and its 2 pods, under beta's max_pods 2: %v, want QUOTA_EXCEEDED", err)
	}
	e.balance(acme)
	for tenant, want := range map[string]string{"acme": "0", "beta": "2"} {
		if got, _ := e.r.Client.HGet(ctx, e.store.Keys().TenantEscrow(tenant), "pods").Result(); got != want {
			t.Errorf("%s's escrow counts %q pods after s1 moved to beta with 2, want %s", tenant, got, want)
		}
	}
}

// The sessions an agent's reports bind again to an adopted pod (the rebuild after a
// data loss) are taken from the tenant's escrow, whatever the quota, since they run
// already: with them counted, no route is granted a session over max_sessions beside
// them. What the report took and did not bind (proven sessions bound elsewhere) goes
// back. Before, the report raised what the scope held and not the escrow, and a fourth
// session was routed under a max_sessions of 3.
func TestTenantQuotaCountsReportedSessions(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.Sessions = 3
	e := quotaEnv(t, l)
	ctx := context.Background()
	e.scope = "s2"
	e.publish(tenantScope("acme", 3))
	e.onePod()
	for _, sid := range []string{"y", "w"} {
		if res := e.route(sid); !res.Served() {
			t.Fatalf("route %s: %+v", sid, res)
		}
	}
	pod := warmpool.Pod{ID: warmpool.PodName("s2", 90), ScopeID: "s2", DeployVer: e.snapVer(), Fence: 90, SSEURL: "http://x/sse", Ready: true}
	if st, err := e.store.PodAdopt(ctx, pod, e.now, true); err != nil || st != redisstore.AdoptAdopted {
		t.Fatalf("adopt: %q, %v", st, err)
	}
	a, err := e.reportProven(pod.ID, []string{"x", "y", "w"}, "x", "y", "w")
	if err != nil || !slices.Equal(a.Unknown, []string{"y", "w"}) {
		t.Fatalf("the adopted pod's report of x, y and w (bound elsewhere): %+v, %v; want y and w unknown", a, err)
	}
	if s := e.snap(); s.Sessions["x"] != pod.ID {
		t.Fatalf("x after the report: %v, want bound to %s", s.Sessions, pod.ID)
	}
	esc, err := e.r.Client.HMGet(ctx, e.store.Keys().TenantEscrow("acme"), "sessions", "sessions|s2").Result()
	q, _ := e.r.Client.HGet(ctx, e.store.Keys().Scope("s2").Config, "q_sess").Result()
	if err != nil || fmt.Sprint(esc...) != "33" || q != "3" {
		t.Fatalf("acme's escrow counts %v sessions (all, s2's; %v), s2's allowance %q, after the report; want the 3 s2 holds", esc, err, q)
	}
	e.scope = "s3"
	e.onePod()
	if _, err := e.store.SessionRoute(ctx, "s3", redisstore.RouteArgs{Now: e.now, Session: "c"}); quotaErr(err) == nil {
		t.Fatalf("a session beside the 3 bound, under max_sessions 3: %v, want QUOTA_EXCEEDED", err)
	}
}
