package redisstore_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// quotaSteps is how many random steps TestTenantQuotasHoldAtEveryStep and
// TestTotalCapHoldsAtEveryStep take: make test takes 3,000, make soak 100,000.
var quotaSteps = flag.Int("quota.steps", 3000, "steps of TestTenantQuotasHoldAtEveryStep and TestTotalCapHoldsAtEveryStep")

// quotaSeed replays a failed run: a seed the test logged (0 draws a new one).
var quotaSeed = flag.Uint64("quota.seed", 0, "seed of TestTenantQuotasHoldAtEveryStep and TestTotalCapHoldsAtEveryStep (0: a new one)")

// Three tenants of two scopes each, with quotas on pods, cpu and sessions, under a
// random mix of acquires (leading deploys), registers, aborted deploys, routes, ended
// sessions, purged pods and balance passes: after every step no tenant holds more
// than a quota allows, each scope holds at most its allowance but for pods it had
// before being governed (none here), and the allowances of a tenant's scopes sum to at
// most what its escrow counts, which stays within the quotas (SPEC §12.1).
func TestTenantQuotasHoldAtEveryStep(t *testing.T) {
	t.Parallel()
	runQuotaSteps(t, 0)
}

// The same steps under a total cap of 7 pods (--max-pods-total), below the tenants'
// pod quotas together (9), with the cap's balance pass among the steps: besides the
// tenants' invariants, every scope's allowance of pods sums to at most what the
// total's escrow counts, which stays within the cap, and so do the pods held.
func TestTotalCapHoldsAtEveryStep(t *testing.T) {
	t.Parallel()
	runQuotaSteps(t, 7)
}

func runQuotaSteps(t *testing.T, cap int64) {
	ctx := context.Background()
	seed := *quotaSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d", seed)
	tenants := []string{"t1", "t2", "t3"}
	lim := map[string]warmpool.TenantLimits{}
	var e *env
	scopes := []string{}
	for i, tn := range tenants {
		l := warmpool.Unlimited()
		l.Pods, l.MilliCPU, l.Sessions = int64(2+i), int64(1000*(i+1)), int64(1+2*i)
		lim[tn] = l
		for j := range 2 {
			scope := fmt.Sprintf("%s-s%d", tn, j)
			mutate := func(c *warmpool.ScopeConfig) {
				c.Tenant, c.Deploy.Resources = tn, warmpool.Resources{CPU: "500m"}
				c.Pool.PodConcurrency, c.Pool.MaxConcurrency = 1+j, 8
			}
			if e == nil {
				e = newEnv(t, mutate)
				e.store.MaxPodsTotal(cap)
			}
			e.scope = scope
			e.publish(mutate)
			scopes = append(scopes, scope)
		}
	}
	for _, tn := range tenants {
		if err := e.store.PublishTenant(ctx, tn, lim[tn]); err != nil {
			t.Fatal(err)
		}
		if err := e.store.BalanceTenant(ctx, tn, lim[tn]); err != nil {
			t.Fatal(err)
		}
	}
	tenantOf := func(scope string) string { return scope[:2] }
	type deploy struct {
		scope string
		res   redisstore.AcquireResult
	}
	var deploys []deploy
	pods := map[string][]string{}
	sessions := map[string][]string{}
	refused, capped := 0, 0
	for step := range *quotaSteps {
		scope := scopes[rng.IntN(len(scopes))]
		e.scope = scope
		e.now = e.now.Add(10 * time.Millisecond)
		switch op := rng.IntN(7); op {
		case 0, 1:
			res, err := e.store.PodAcquire(ctx, scope, e.acquireArgs(fmt.Sprintf("c%d", step)))
			switch q := quotaErr(err); {
			case q != nil:
				refused++
				if d, _ := q.Details.(*warmpool.QuotaDetails); d != nil && d.Quota == "max_pods_total" {
					capped++
				}
			case err != nil && warmpool.ErrorCode(err) != warmpool.CodeNoPodAvailable:
				t.Fatalf("step %d: acquire: %v", step, err)
			case err == nil && res.Kind == redisstore.AcquireDeploy:
				deploys = append(deploys, deploy{scope, res})
			}
		case 2:
			if len(deploys) > 0 {
				i := rng.IntN(len(deploys))
				d := deploys[i]
				deploys = append(deploys[:i], deploys[i+1:]...)
				e.scope = d.scope
				if rng.IntN(3) == 0 {
					if _, err := e.store.DeployAbort(ctx, d.scope, d.res.Deploy, d.res.Spec.DeployVer(), "x", true, e.now, e.now.Add(time.Minute)); err != nil {
						t.Fatal(err)
					}
				} else if pod, _, err := e.register(d.res, ""); err == nil {
					pods[d.scope] = append(pods[d.scope], pod.ID)
				}
			}
		case 3:
			sid := fmt.Sprintf("u%d", step)
			res, err := e.store.SessionRoute(ctx, scope, redisstore.RouteArgs{Now: e.now, Session: sid})
			switch {
			case quotaErr(err) != nil:
				refused++
			case err != nil:
				t.Fatalf("step %d: route: %v", step, err)
			case res.Served():
				sessions[scope] = append(sessions[scope], sid)
			}
		case 4:
			if s := sessions[scope]; len(s) > 0 {
				i := rng.IntN(len(s))
				if _, err := e.store.SessionEnd(ctx, scope, s[i], e.now); err != nil {
					t.Fatal(err)
				}
				sessions[scope] = append(s[:i], s[i+1:]...)
			}
		case 5:
			if p := pods[scope]; len(p) > 0 && rng.IntN(2) == 0 {
				i := rng.IntN(len(p))
				gone, err := e.store.PodPurge(ctx, scope, p[i], "x", nil)
				if err != nil {
					t.Fatal(err)
				}
				pods[scope] = append(p[:i], p[i+1:]...)
				for _, g := range gone {
					for j, s := range sessions[scope] {
						if s == g {
							sessions[scope] = append(sessions[scope][:j], sessions[scope][j+1:]...)
							break
						}
					}
				}
			}
		case 6:
			tn := tenantOf(scope)
			if err := e.store.BalanceTenant(ctx, tn, lim[tn]); err != nil {
				t.Fatal(err)
			}
			if err := e.store.BalanceGranted(ctx, nil); err != nil {
				t.Fatal(err)
			}
		}
		checkQuotas(t, e, step, tenants, scopes, lim)
		if cap > 0 {
			checkTotal(t, e, step, scopes, cap)
		}
	}
	if refused == 0 || (cap > 0) != (capped > 0) {
		t.Fatalf("%d calls refused in %d steps, %d by the cap %d: the quotas (and a cap) were never reached", refused, *quotaSteps, capped, cap)
	}
}

// checkQuotas checks the quota invariants of TestTenantQuotasHoldAtEveryStep.
func checkQuotas(t *testing.T, e *env, step int, tenants, scopes []string, lim map[string]warmpool.TenantLimits) {
	t.Helper()
	ctx := context.Background()
	c := e.r.Client
	for _, tn := range tenants {
		var held, sess, allowP, allowS int64
		for _, s := range scopes {
			if s[:2] != tn {
				continue
			}
			k := e.store.Keys().Scope(s)
			p, _ := c.ZCard(ctx, k.Pods).Result()
			d, _ := c.ZCard(ctx, k.Deploying).Result()
			n, _ := c.HLen(ctx, k.Sessions).Result()
			q, _ := c.HMGet(ctx, k.Config, "q_pods", "q_sess").Result()
			qp, _ := strconv.ParseInt(fmt.Sprint(q[0]), 10, 64)
			qs, _ := strconv.ParseInt(fmt.Sprint(q[1]), 10, 64)
			if p+d > qp || n > qs {
				t.Fatalf("step %d: scope %s holds %d pods and %d sessions over its allowance %d, %d", step, s, p+d, n, qp, qs)
			}
			held, sess, allowP, allowS = held+p+d, sess+n, allowP+qp, allowS+qs
		}
		esc, _ := c.HMGet(ctx, e.store.Keys().TenantEscrow(tn), "pods", "sessions", "cpu_m").Result()
		ep, _ := strconv.ParseInt(fmt.Sprint(esc[0]), 10, 64)
		es, _ := strconv.ParseInt(fmt.Sprint(esc[1]), 10, 64)
		ec, _ := strconv.ParseInt(fmt.Sprint(esc[2]), 10, 64)
		l := lim[tn]
		if held > l.Pods || held*500 > l.MilliCPU || sess > l.Sessions {
			t.Fatalf("step %d: tenant %s holds %d pods (%dm) and %d sessions over its quotas %+v", step, tn, held, held*500, sess, l)
		}
		if allowP > ep || allowS > es || ep > l.Pods || ec > l.MilliCPU || es > l.Sessions {
			t.Fatalf("step %d: tenant %s: allowances %d pods, %d sessions; escrow %d pods (%dm), %d sessions; quotas %+v",
				step, tn, allowP, allowS, ep, ec, es, l)
		}
	}
}

// checkTotal checks the total cap's invariants of TestTotalCapHoldsAtEveryStep.
func checkTotal(t *testing.T, e *env, step int, scopes []string, cap int64) {
	t.Helper()
	ctx := context.Background()
	var held, allow int64
	for _, s := range scopes {
		k := e.store.Keys().Scope(s)
		p, _ := e.r.Client.ZCard(ctx, k.Pods).Result()
		d, _ := e.r.Client.ZCard(ctx, k.Deploying).Result()
		q, _ := e.r.Client.HGet(ctx, k.Config, "q_pods").Result()
		qp, _ := strconv.ParseInt(q, 10, 64)
		held, allow = held+p+d, allow+qp
	}
	if held > cap || allow > e.totalHeld() || e.totalHeld() > cap {
		t.Fatalf("step %d: %d pods held, allowances %d, the total's escrow %d, the cap %d", step, held, allow, e.totalHeld(), cap)
	}
}
