package redisstore_test

import (
	"context"
	"slices"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/redisstore"
)

// fillWarm starts the scope's warm refills until it has no more to start, registers
// each as a pod, and returns how many it started.
func (e *env) fillWarm() int {
	e.t.Helper()
	deploys := e.warmDeploys()
	for _, d := range deploys {
		if _, _, err := e.register(redisstore.AcquireResult{Deploy: d.Deploy, Fence: d.Fence, Spec: d.Spec}, ""); err != nil {
			e.t.Fatal(err)
		}
	}
	return len(deploys)
}

// kept counts the scope's idle pods that may take a session (not retired).
func (e *env) kept() int {
	e.t.Helper()
	n := 0
	for _, p := range e.poolSnap().Pods {
		if p.Idle && !p.Retired {
			n++
		}
	}
	return n
}

// A tenant's max_idle_pods holds across its scopes: its refills together stop at it,
// split max-min between the scopes that want more; warm pods over a lowered quota are
// retired at once; removing the quota lets the scopes refill to min_idle_pods again.
func TestTenantMaxIdlePods(t *testing.T) {
	t.Parallel()
	e := quotaEnv(t, warmpool.Unlimited())
	for _, s := range []string{"s1", "s2", "s3"} {
		e.scope = s
		e.publish(func(c *warmpool.ScopeConfig) {
			c.Tenant, c.Deploy.Resources = "acme", warmpool.Resources{CPU: "500m"}
			c.Pool.PodConcurrency, c.Pool.MaxConcurrency, c.Pool.MinIdlePods = 1, 8, map[string]int{"s1": 1, "s2": 4, "s3": 4}[s]
		})
	}
	l := warmpool.Unlimited()
	l.IdlePods = 5
	e.limit(l)
	// wants 1, 4, 4 under 5: s1 gets its 1, s2 and s3 two each
	var got []int
	for _, s := range []string{"s1", "s2", "s3"} {
		e.scope = s
		got = append(got, e.fillWarm())
	}
	if !slices.Equal(got, []int{1, 2, 2}) {
		t.Fatalf("refills of s1, s2, s3 under max_idle_pods 5: %v, want [1 2 2]", got)
	}
	e.scope = "s2"
	if n := e.fillWarm(); n != 0 {
		t.Fatalf("s2 refilled %d more at its share", n)
	}

	// A lower quota retires the warm pods over each share, the longest idle first.
	l.IdlePods = 2
	e.limit(l)
	got = got[:0]
	for _, s := range []string{"s1", "s2", "s3"} {
		e.scope = s
		got = append(got, e.kept())
	}
	// wants 1, 4, 4 under 2: nothing for the one that wants least, one each for the others
	if !slices.Equal(got, []int{0, 1, 1}) {
		t.Fatalf("warm pods of s1, s2, s3 after max_idle_pods 2: %v, want [0 1 1]", got)
	}

	// Without the quota the scopes refill to min_idle_pods.
	e.limit(warmpool.Unlimited())
	e.scope = "s3"
	if n := e.fillWarm(); n+got[2] != 4 {
		t.Fatalf("s3 refilled %d to its %d after the quota went, want min_idle_pods 4", n, got[2])
	}
}

// A scope's share counts the warm pods it keeps, not only its target: pods left idle
// by ended sessions stay while the tenant is under its quota.
func TestTenantMaxIdlePodsKeepsWhatIsUnderIt(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.IdlePods = 3
	e := quotaEnv(t, l)
	for _, sid := range []string{"a", "b"} {
		e.onePod()
		if res := e.route(sid); !res.Served() {
			t.Fatalf("route %s: %+v", sid, res)
		}
	}
	for _, sid := range []string{"a", "b"} {
		if _, err := e.store.SessionEnd(context.Background(), e.scope, sid, e.now); err != nil {
			t.Fatal(err)
		}
	}
	e.balance(l)
	if n := e.kept(); n != 2 {
		t.Fatalf("s1 keeps %d idle pods under max_idle_pods 3 with min_idle_pods 0, want its 2", n)
	}
}

// A scope published into a tenant with max_idle_pods refills nothing until the
// tenant's next pass gives it its share; one that moves to a tenant without the quota
// refills to min_idle_pods at once.
func TestTenantMaxIdlePodsFollowTheScopesTenant(t *testing.T) {
	t.Parallel()
	l := warmpool.Unlimited()
	l.IdlePods = 2
	e := quotaEnv(t, l)
	with := func(tenant string) func(*warmpool.ScopeConfig) {
		return func(c *warmpool.ScopeConfig) {
			c.Tenant, c.Pool.PodConcurrency, c.Pool.MaxConcurrency, c.Pool.MinIdlePods = tenant, 1, 8, 3
		}
	}
	e.scope = "s4"
	e.publish(with("acme"))
	if n := e.fillWarm(); n != 0 {
		t.Fatalf("s4, new in acme, refilled %d before acme's pass", n)
	}
	e.balance(l)
	if n := e.fillWarm(); n != 2 {
		t.Fatalf("s4 refilled %d after acme's pass, want max_idle_pods 2", n)
	}
	e.publish(with("other"))
	if n := e.fillWarm(); n != 1 {
		t.Fatalf("s4 refilled %d once it named a tenant without quotas, want 1 more to min_idle_pods 3", n)
	}
}
