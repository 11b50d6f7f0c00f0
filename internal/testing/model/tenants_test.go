package model_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/model"
)

// TestEscrowsFollowTheModel is TestScriptsFollowTheModel with tenants: scopes a and b
// name tenant t1, c names t2 and d t3, each tenant with quotas on pods or what they
// request (t1's cpu, t3's memory) and on sessions, so that every scope is governed
// and its acquires, warm refills, routes and adoptions ask the escrow (SPEC §12.1).
// Balance passes join the steps, and changes of t3's limits (lifted, put back,
// lowered), each followed by the pass a replica's feed runs. After every step, besides
// what the model test compares, each tenant's escrow and each scope's allowances in
// Redis equal the model's, a refusal by a quota names the quota, limit and use the
// model names, and no tenant whose quotas never changed and whose governed scopes
// adopted no running pod holds more pods, cpu, memory or sessions than they allow.
// make test runs 100 sequences of 60 steps; make soak 300 of 400 (SOAK_TENANT_CHECKS,
// SOAK_STEPS), 120,000 steps.
func TestEscrowsFollowTheModel(t *testing.T) {
	runModel(t, tenantWeights, tenantScopes, *steps)
}

// tenantWeights are the model test's steps with the tenants' own.
var tenantWeights = func() map[string]int {
	w := maps.Clone(weights)
	w["tenant_balance"], w["tenant_put"] = 3, 1
	return w
}()

// tenantSet names each scope's tenant, the cpu and memory its pods request, and each
// tenant's limits at the start.
type tenantSet struct {
	of        map[string]string
	moves     map[string]string // scope -> the tenant its variant movedVariant names
	resources map[string]warmpool.Resources
	limits    map[string]warmpool.TenantLimits
}

// limitsOf are limits with these quotas (-1: none).
func limitsOf(pods, cpu, mem, sessions int64) warmpool.TenantLimits {
	l := warmpool.Unlimited()
	l.Pods, l.MilliCPU, l.MemoryBytes, l.Sessions = pods, cpu, mem, sessions
	return l
}

// The tenants' scopes: a and c are the model test's a, b and d its b. t1's quotas bind
// on pods with a's pods of 500m and on cpu with b's of a whole core; t2's on pods and
// sessions; t3's on memory (64Mi pods) and sessions, until a change of its limits.
var tenantScopes = scopes{
	configs:  map[string][2]warmpool.PoolConfig{"a": scopeConfigs["a"], "b": scopeConfigs["b"], "c": scopeConfigs["a"], "d": scopeConfigs["b"]},
	sessions: 5, waiters: 4,
	tenants: &tenantSet{
		of:        map[string]string{"a": "t1", "b": "t1", "c": "t2", "d": "t3"},
		moves:     map[string]string{"b": "t2"},
		resources: map[string]warmpool.Resources{"a": {CPU: "500m", Memory: "512Mi"}, "b": {CPU: "1", Memory: "512Mi"}, "c": {CPU: "500m", Memory: "512Mi"}, "d": {CPU: "250m", Memory: "64Mi"}},
		limits: map[string]warmpool.TenantLimits{
			"t1": limitsOf(2, 1500, -1, 2),
			"t2": limitsOf(1, -1, -1, 1),
			"t3": limitsOf(-1, -1, 64<<20, 1),
		},
	},
}

// movedVariant is the variant (of variants) under which a scope of tenantSet.moves
// names its other tenant: published with it and back, the scope moves from one tenant
// to the other with what it holds.
const movedVariant = 2

// t3Limits are the limits a tenant_put step gives t3 in turn: its first, none, and
// one pod.
var t3Limits = []warmpool.TenantLimits{tenantScopes.tenants.limits["t3"], warmpool.Unlimited(), limitsOf(1, -1, -1, -1)}

// tenantWorld is the tenants' side of a world.
type tenantWorld struct {
	set    *tenantSet
	model  *model.Tenants
	limits map[string]warmpool.TenantLimits
	// loose are the tenants that may rightly hold more than their quotas allow: their
	// limits changed, or a scope of theirs adopted a running pod or moved in with what
	// it holds, which is counted whatever the quota.
	loose map[string]bool
	// named is the tenant each scope named after the last step.
	named map[string]string
}

// joinTenants has the side's scope name its tenant and request its resources, on both
// sides, before its first publish.
func (w *world) joinTenants(s *side, set *tenantSet) {
	if set == nil {
		return
	}
	if w.tenants == nil {
		w.tenants = &tenantWorld{set: set, model: model.NewTenants(), limits: maps.Clone(set.limits), loose: map[string]bool{}, named: map[string]string{}}
	}
	for i := range s.configs {
		s.configs[i].Tenant, s.configs[i].Deploy.Resources = set.of[s.id], set.resources[s.id]
		if tn, ok := set.moves[s.id]; ok && i == movedVariant {
			s.configs[i].Tenant = tn
		}
	}
	w.tenants.model.Join(s.model)
}

// putLimits publishes every tenant's first limits and runs each one's balance pass,
// which governs its scopes, on both sides.
func (w *world) putLimits(set *tenantSet) {
	if set == nil {
		return
	}
	for _, tn := range slices.Sorted(maps.Keys(set.limits)) {
		w.putTenant(tn, set.limits[tn])
	}
}

// putTenant publishes the tenant's limits and runs its balance pass, as a replica's
// feed does on a change, on both sides.
func (w *world) putTenant(tn string, l warmpool.TenantLimits) {
	ctx := context.Background()
	got, want := w.store.PublishTenant(ctx, tn, l), w.tenants.model.Publish(tn, l)
	w.same("tenant_put", nil, nil, got, want)
	w.tenants.limits[tn] = l
	w.balance(tn)
}

// balance runs the tenant's balance pass on both sides.
func (w *world) balance(tn string) {
	l := w.tenants.limits[tn]
	got, want := w.store.BalanceTenant(context.Background(), tn, l), w.tenants.model.Balance(tn, l)
	w.same("tenant_balance", nil, nil, got, want)
}

// tenantSteps are the steps of the tenants: a balance pass of one, and a change of
// t3's limits with its pass.
func (w *world) tenantSteps(step func(string, func(*side)) func(*rapid.T)) map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"tenant_balance": step("tenant_balance", func(s *side) {
			if w.tenants != nil {
				w.balance(rapid.SampledFrom(slices.Sorted(maps.Keys(w.tenants.limits))).Draw(w.t, "tenant"))
			}
		}),
		"tenant_put": step("tenant_put", func(*side) {
			if w.tenants != nil {
				w.tenants.loose["t3"] = true
				w.putTenant("t3", rapid.SampledFrom(t3Limits).Draw(w.t, "t3 limits"))
			}
		}),
	}
}

// sameQuota fails the run when a refusal by a quota names another quota, limit, use
// or tenant in Redis than in the model (the Retry-After comes from a release rate the
// model does not keep).
func (w *world) sameQuota(what string, gotErr, wantErr error) {
	w.t.Helper()
	var g, m *warmpool.Error
	if !errors.As(gotErr, &g) || !errors.As(wantErr, &m) || g.Code != warmpool.CodeQuotaExceeded {
		return
	}
	if !reflect.DeepEqual(g.Details, m.Details) || g.Message != m.Message {
		w.t.Fatalf("%s: redis refused with %q %+v, the model with %q %+v", what, g.Message, g.Details, m.Message, m.Details)
	}
}

// adopted marks the tenant of a governed scope that adopted a running pod loose.
func (w *world) adopted(s *side) {
	if w.tenants != nil {
		tn, _ := s.model.Field("tenant").(string)
		w.tenants.loose[tn] = true
	}
}

// compareTenants fails the run when a tenant's escrow or a scope's allowances differ
// between Redis and the model, or a tenant holds more than its quotas allow.
func (w *world) compareTenants(after string, changed *side) {
	w.t.Helper()
	tw := w.tenants
	if tw == nil {
		return
	}
	ctx, c := context.Background(), w.r.Client
	type use struct{ pods, cpu, mem, sessions int64 }
	held := map[string]*use{}
	escrows := map[string]map[string]string{}
	for _, s := range w.sides {
		k := w.store.Keys().Scope(s.id)
		got, err := c.HMGet(ctx, k.Config, "q_pods", "q_sess", "cpu_m", "memory_b").Result()
		if err != nil {
			w.t.Fatal(err)
		}
		want := []any{s.model.Field("q_pods"), s.model.Field("q_sess")}
		if !reflect.DeepEqual(got[:2], want) {
			w.t.Fatalf("after %s on scope %s, scope %s's allowances (q_pods, q_sess) are %v in redis, %v in the model", after, changed.id, s.id, got[:2], want)
		}
		snap := s.model.Snapshot()
		n := int64(len(snap.Pods) + len(snap.Deploys))
		cpu, _ := strconv.ParseInt(fmt.Sprint(got[2]), 10, 64)
		mem, _ := strconv.ParseInt(fmt.Sprint(got[3]), 10, 64)
		tn, _ := s.model.Field("tenant").(string)
		if was := tw.named[s.id]; tn != "" && was != tn {
			tw.named[s.id] = tn
			if was != "" {
				tw.loose[tn] = true
			}
		}
		u := held[tn]
		if u == nil {
			u = &use{}
			held[tn] = u
		}
		u.pods, u.cpu, u.mem, u.sessions = u.pods+n, u.cpu+n*cpu, u.mem+n*mem, u.sessions+int64(len(snap.Sessions))
	}
	for _, tn := range slices.Sorted(maps.Keys(tw.set.limits)) {
		got, err := c.HGetAll(ctx, w.store.Keys().TenantEscrow(tn)).Result()
		if err != nil {
			w.t.Fatal(err)
		}
		maps.DeleteFunc(got, func(f, _ string) bool { return strings.HasPrefix(f, "rate") })
		escrows[tn] = got
		if want := tw.model.Escrow(tn); !maps.Equal(got, want) {
			w.t.Fatalf("after %s on scope %s, tenant %s's escrow is\n  %v in redis,\n  %v in the model", after, changed.id, tn, got, want)
		}
		l, u := tw.limits[tn], held[tn]
		if u == nil {
			u = &use{}
		}
		over := func(limit, n int64) bool { return limit >= 0 && n > limit }
		if !tw.loose[tn] && (over(l.Pods, u.pods) || over(l.MilliCPU, u.cpu) || over(l.MemoryBytes, u.mem) || over(l.Sessions, u.sessions)) {
			w.t.Fatalf("after %s on scope %s, tenant %s holds %d pods (%dm cpu, %d bytes) and %d sessions over its quotas %+v",
				after, changed.id, tn, u.pods, u.cpu, u.mem, u.sessions, l)
		}
	}
	// Every governed scope holds at most its allowance, and its tenant's escrow granted
	// it at least that: what a tenant's scopes hold, its escrow counts (the sessions an
	// agent's report binds again too: they are taken from the escrow first).
	for _, s := range w.sides {
		tn, _ := s.model.Field("tenant").(string)
		snap := s.model.Snapshot()
		for _, d := range []struct {
			dim, field string
			held       int
		}{{"pods", "q_pods", len(snap.Pods) + len(snap.Deploys)}, {"sessions", "q_sess", len(snap.Sessions)}} {
			q, ok := s.model.Field(d.field).(string)
			if !ok {
				continue
			}
			if granted := escrows[tn][d.dim+"|"+s.id]; d.held > atoi(q) || atoi(q) > atoi(granted) {
				w.t.Fatalf("after %s on scope %s, scope %s holds %d %s with an allowance of %s, of which tenant %s's escrow granted it %q",
					after, changed.id, s.id, d.held, d.dim, q, tn, granted)
			}
		}
	}
}

// atoi is a count of a HASH field ("" or absent: 0).
func atoi(v string) int {
	n, _ := strconv.Atoi(v)
	return n
}
