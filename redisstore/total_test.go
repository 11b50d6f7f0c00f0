package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// capEnv is an env under --max-pods-total cap whose scopes (one session per pod)
// name the tenants given, scope i the tenant tenants[i], each tenant of the weight
// given (its published limits: no quota but the weight), every scope governed by the
// first balance pass.
func capEnv(t *testing.T, cap int64, tenants []string, weights []int64) (*env, []string) {
	t.Helper()
	ctx := context.Background()
	var e *env
	scopes := make([]string, len(tenants))
	for i, tn := range tenants {
		mutate := capScope(tn)
		scopes[i] = fmt.Sprintf("%s-s%d", tn, i)
		if e == nil {
			e = newEnv(t, mutate)
			e.store.MaxPodsTotal(cap)
		}
		e.scope = scopes[i]
		e.publish(mutate)
		l := warmpool.Unlimited()
		l.Weight = weights[i]
		if err := e.store.PublishTenant(ctx, tn, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.BalanceGranted(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return e, scopes
}

// capScope is the config of capEnv's scopes, naming the tenant.
func capScope(tenant string) func(*warmpool.ScopeConfig) {
	return func(c *warmpool.ScopeConfig) {
		c.Tenant = tenant
		c.Pool.PodConcurrency, c.Pool.MaxConcurrency, c.Pool.MinIdlePods = 1, 16, 1
	}
}

// totalHeld is what the total's escrow counts as granted ("pods").
func (e *env) totalHeld() int64 {
	e.t.Helper()
	v, err := e.r.Client.HGet(context.Background(), e.store.Keys().TotalEscrow(), "pods").Result()
	if err != nil && v == "" {
		return 0
	}
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// leadAll has the scope lead n deploys, each of which must be granted.
func (e *env) leadAll(scope string, n int) []redisstore.AcquireResult {
	e.t.Helper()
	var led []redisstore.AcquireResult
	for i := range n {
		res, err := e.store.PodAcquire(context.Background(), scope, e.acquireArgs(fmt.Sprintf("%s-lead%d", scope, i)))
		if err != nil || res.Kind != redisstore.AcquireDeploy {
			e.t.Fatalf("%s's acquire %d with the cap free: %+v, %v", scope, i, res, err)
		}
		led = append(led, res)
	}
	return led
}

// The total cap holds across tenants with no quotas of their own: 24 concurrent
// acquires over three scopes of three tenants lead exactly 4 deploys under a cap of
// 4 (the first scope published before the cap's first pass, governed by it), the
// rest refused with max_pods_total, its limit and use and a Retry-After; a deploy
// that ends gives its pod back at once, and another tenant leads one.
func TestTotalCapHoldsAcrossTenants(t *testing.T) {
	t.Parallel()
	e, scopes := capEnv(t, 4, []string{"t1", "t2", "t3"}, []int64{1, 1, 1})
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	led := map[string][]redisstore.AcquireResult{}
	refused := 0
	for i := range 24 {
		wg.Go(func() {
			scope := scopes[i%3]
			res, err := e.store.PodAcquire(ctx, scope, e.acquireArgs(fmt.Sprintf("c%d", i)))
			mu.Lock()
			defer mu.Unlock()
			switch q := quotaErr(err); {
			case q != nil:
				d, _ := q.Details.(*warmpool.QuotaDetails)
				if d == nil || d.Quota != "max_pods_total" || d.Limit != int64(4) || q.RetryAfter < 1 {
					t.Errorf("refusal %+v, details %+v: want max_pods_total, limit 4, Retry-After ≥ 1", q, q.Details)
				}
				refused++
			case warmpool.ErrorCode(err) == warmpool.CodeNoPodAvailable:
				refused++
			case err != nil:
				t.Error(err)
			case res.Kind == redisstore.AcquireDeploy:
				led[scope] = append(led[scope], res)
			default:
				t.Errorf("acquire %d: %+v", i, res)
			}
		})
	}
	wg.Wait()
	n := 0
	for _, l := range led {
		n += len(l)
	}
	if n != 4 || e.totalHeld() != 4 {
		t.Fatalf("led %d deploys (%v), the total counts %d, refused %d: want 4 under max_pods_total 4", n, led, e.totalHeld(), refused)
	}
	// A pod of the tenant that led most goes to the one that led fewest (below its
	// share, as the cap's first refusals made every tenant a rival).
	from, other := scopes[0], scopes[0]
	for _, s := range scopes {
		if len(led[s]) > len(led[from]) {
			from = s
		}
		if len(led[s]) < len(led[other]) {
			other = s
		}
	}
	d := led[from][0]
	if _, err := e.store.DeployAbort(ctx, from, d.Deploy, d.Spec.DeployVer(), "gone", true, e.now, e.now.Add(30*time.Second)); err != nil {
		t.Fatal(err)
	}
	if e.totalHeld() != 3 {
		t.Fatalf("after a deploy ended the total counts %d, want 3: its pod goes back at once", e.totalHeld())
	}
	if res, err := e.store.PodAcquire(ctx, other, e.acquireArgs("late")); err != nil || res.Kind != redisstore.AcquireDeploy {
		t.Fatalf("%s after a pod came back: %+v, %v, want a deploy", other, res, err)
	}
}

// Under a binding cap of 6, tenant a (weight 1) holding every pod and tenant b
// (weight 2) refused 4 times: as a's pods go one at a time, each goes to b, not back to a,
// until each holds its weighted share (a 2, b 4); then a pod of a's that goes is a's
// again, since b is at its share; and a's warm refill yields to b's live demand.
func TestTotalCapSharesByWeight(t *testing.T) {
	t.Parallel()
	e, scopes := capEnv(t, 6, []string{"a", "b"}, []int64{1, 2})
	ctx := context.Background()
	sa, sb := scopes[0], scopes[1]
	mine := e.leadAll(sa, 6)
	ask := func(scope, claim string) bool {
		t.Helper()
		res, err := e.store.PodAcquire(ctx, scope, e.acquireArgs(claim))
		if quotaErr(err) != nil {
			return false
		}
		if err != nil || res.Kind != redisstore.AcquireDeploy {
			t.Fatalf("%s's acquire: %+v, %v", scope, res, err)
		}
		return true
	}
	end := func(scope string, d redisstore.AcquireResult) {
		t.Helper()
		if _, err := e.store.DeployAbort(ctx, scope, d.Deploy, d.Spec.DeployVer(), "done", true, e.now, e.now.Add(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if ask(sb, fmt.Sprintf("b-first%d", i)) {
			t.Fatal("b led a deploy past the cap")
		}
	}
	var bs []redisstore.AcquireResult
	for i := 0; len(mine) > 2; i++ {
		end(sa, mine[0])
		mine = mine[1:]
		if ask(sa, fmt.Sprintf("a-again%d", i)) {
			t.Fatalf("a (holding %d, share 2) took back a pod b (holding %d, share 4) waits for", len(mine), len(bs))
		}
		res, err := e.store.PodAcquire(ctx, sb, e.acquireArgs(fmt.Sprintf("b%d", i)))
		if err != nil || res.Kind != redisstore.AcquireDeploy {
			t.Fatalf("b below its share after a's pod went: %+v, %v, want a deploy", res, err)
		}
		bs = append(bs, res)
	}
	if len(bs) != 4 || e.totalHeld() != 6 {
		t.Fatalf("b holds %d, the total %d: want b at its share 4 and the cap full", len(bs), e.totalHeld())
	}
	end(sa, mine[0])
	if ask(sb, "b-over") {
		t.Fatal("b took a pod past its share while a, below its share, wants")
	}
	if !ask(sa, "a-back") {
		t.Fatal("a, below its share, was refused the pod it gave back")
	}
	end(sb, bs[0])
	if res, err := e.store.PodPlaceholder(ctx, sa, e.now, e.now.Add(30*time.Second), e.now.Add(30*time.Second)); err != nil || res.Kind != redisstore.PlaceholderQuota {
		t.Fatalf("a's warm refill at its share while b wants: %+v, %v, want it to yield (quota)", res, err)
	}
	if !ask(sb, "b-back") {
		t.Fatal("b, below its share, was refused after its pod went")
	}
}

// A tenant over its weighted share gives pods up while a rival below its own waits: a
// (weight 1) holds all 6 pods of the cap, busy, a is refused once and b 4 times; the
// tenants job retires 4 of a's pods (no new session on them), once only however often
// it runs; as they go, b (weight 2) gets the 4 of its share and a no more.
func TestTotalCapTakesBackOverShare(t *testing.T) {
	t.Parallel()
	e, scopes := capEnv(t, 6, []string{"a", "b"}, []int64{1, 2})
	ctx := context.Background()
	sa, sb := scopes[0], scopes[1]
	e.scope = sa
	var pods []string
	for i := range 6 {
		pod, _, err := e.register(e.acquire(fmt.Sprintf("a%d", i)), "")
		if err != nil {
			t.Fatal(err)
		}
		pods = append(pods, pod.ID)
		if res := e.route(fmt.Sprintf("s%d", i)); !res.Served() {
			t.Fatalf("route %d: %+v", i, res)
		}
	}
	for i, s := range []string{sa, sb, sb, sb, sb} {
		if _, err := e.store.PodAcquire(ctx, s, e.acquireArgs(fmt.Sprintf("more%d", i))); quotaErr(err) == nil {
			t.Fatalf("%s past the cap: %v, want QUOTA_EXCEEDED", s, err)
		}
	}
	retired := func() []string {
		t.Helper()
		var out []string
		for _, p := range pods {
			if v, _ := e.r.Client.HGet(ctx, e.store.Keys().Scope(sa).PodVer, p).Result(); v == "retired" {
				out = append(out, p)
			}
		}
		return out
	}
	for range 3 {
		if err := e.store.BalanceGranted(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if r := retired(); len(r) != 4 {
			t.Fatalf("a's retired pods %v, want 4: what it holds over its share 2", r)
		}
	}
	for _, p := range retired() {
		if _, err := e.store.PodPurge(ctx, sa, p, "yielded", nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if res, err := e.store.PodAcquire(ctx, sb, e.acquireArgs(fmt.Sprintf("b%d", i))); err != nil || res.Kind != redisstore.AcquireDeploy {
			t.Fatalf("b's acquire %d below its share: %+v, %v", i, res, err)
		}
	}
	if _, err := e.store.PodAcquire(ctx, sa, e.acquireArgs("a-again")); quotaErr(err) == nil {
		t.Fatalf("a past the cap at its share: %v", err)
	}
}

// A rival's reserve is what it was refused, not its whole share: b (weight 2, share 4
// of a cap of 6) refused once holds back one pod from a, not four; once b is granted
// it, a takes the rest.
func TestTotalCapReservesWhatIsWanted(t *testing.T) {
	t.Parallel()
	e, scopes := capEnv(t, 6, []string{"a", "b"}, []int64{1, 2})
	ctx := context.Background()
	sa, sb := scopes[0], scopes[1]
	mine := e.leadAll(sa, 6)
	if _, err := e.store.PodAcquire(ctx, sb, e.acquireArgs("b0")); quotaErr(err) == nil {
		t.Fatalf("b past the cap: %v", err)
	}
	for _, d := range mine[:2] {
		if _, err := e.store.DeployAbort(ctx, sa, d.Deploy, d.Spec.DeployVer(), "done", true, e.now, e.now.Add(30*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := e.store.PodAcquire(ctx, sa, e.acquireArgs("a-again")); err != nil || res.Kind != redisstore.AcquireDeploy {
		t.Fatalf("a with 2 pods free and b wanting 1: %+v, %v, want a deploy", res, err)
	}
	if _, err := e.store.PodAcquire(ctx, sa, e.acquireArgs("a-more")); quotaErr(err) == nil {
		t.Fatalf("a took the pod b waits for: %v", err)
	}
	if res, err := e.store.PodAcquire(ctx, sb, e.acquireArgs("b1")); err != nil || res.Kind != redisstore.AcquireDeploy {
		t.Fatalf("b's pod: %+v, %v", res, err)
	}
}

// The cap holds from a replica's first call: with no tenants pass run yet (nothing of
// the cap written to Redis, as after a Redis that lost its data), a scope published
// under a cap of 2 leads 2 deploys and is refused the third by max_pods_total.
func TestTotalCapHoldsBeforeAnyPass(t *testing.T) {
	t.Parallel()
	mutate := func(c *warmpool.ScopeConfig) {
		c.Tenant = "t1"
		c.Pool.PodConcurrency, c.Pool.MaxConcurrency = 1, 16
	}
	e := newEnv(t, mutate)
	e.store.MaxPodsTotal(2)
	e.publish(mutate)
	e.leadAll(e.scope, 2)
	_, err := e.store.PodAcquire(context.Background(), e.scope, e.acquireArgs("third"))
	var d *warmpool.QuotaDetails
	if q := quotaErr(err); q != nil {
		d, _ = q.Details.(*warmpool.QuotaDetails)
	}
	if d == nil || d.Quota != "max_pods_total" || d.Limit != int64(2) {
		t.Fatalf("a third deploy under max_pods_total 2 with no pass run: %v (the total counts %d), want QUOTA_EXCEEDED max_pods_total", err, e.totalHeld())
	}
}

// A scope that moves to another tenant keeps its pods counted under the cap: the new
// tenant's governing publish takes them from the total's escrow too, and the old
// tenant's pass gives back to the total what that tenant had granted the scope, not
// what both had. Before, that pass credited the total with all the scope's grants,
// the total counted none of its pods, and other scopes deployed past the cap.
func TestTotalCapFollowsAScopeThatMoves(t *testing.T) {
	t.Parallel()
	e, scopes := capEnv(t, 4, []string{"t1", "t2"}, []int64{1, 1})
	ctx := context.Background()
	e.leadAll(scopes[0], 2)
	e.scope = scopes[0]
	e.publish(capScope("t2"))
	l := warmpool.Unlimited()
	if err := e.store.BalanceTenant(ctx, "t1", l); err != nil {
		t.Fatal(err)
	}
	if n := e.totalHeld(); n != 2 {
		t.Fatalf("the total counts %d pods after %s moved from t1 to t2 with 2, want 2", n, scopes[0])
	}
	e.leadAll(scopes[1], 2)
	_, err := e.store.PodAcquire(ctx, scopes[1], e.acquireArgs("fifth"))
	if q := quotaErr(err); q == nil {
		t.Fatalf("a fifth deploy under max_pods_total 4: %v (the total counts %d), want QUOTA_EXCEEDED", err, e.totalHeld())
	}
}
