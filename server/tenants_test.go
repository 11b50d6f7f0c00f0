package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/server"
)

// limits reads the tenant's limits published in Redis; ok is false when none are.
func limits(tb testing.TB, st *redisstore.Store, tenant string) (warmpool.TenantLimits, bool) {
	tb.Helper()
	l, ok, err := st.TenantLimits(context.Background(), tenant)
	if err != nil {
		tb.Fatal(err)
	}
	return l, ok
}

// A tenant's quotas go in, are published to Redis as limits (quantities in millicores
// and bytes, NoLimit where none is set), come back with what the tenant's scopes use
// (formatted as quantities), page as the scopes do, and go: a delete forgets them,
// and the tenant, which its scope still names, has no limit from then on.
func TestTenantQuotas(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	st := e.srv.Store()
	put := e.ok(http.MethodPut, "/v1/tenants/acme", `{"max_pods":10,"max_cpu":"4","max_memory":"8Gi","max_sessions":20,"weight":3}`)
	keys(t, put, "tenant", "version")
	if put["tenant"] != "acme" || num(t, put, "version") != 1 {
		t.Fatalf("PUT answered %v", put)
	}
	want := warmpool.TenantLimits{Pods: 10, MilliCPU: 4000, MemoryBytes: 8 << 30, Sessions: 20, IdlePods: warmpool.NoLimit, Weight: 3}
	if got, _ := limits(t, st, "acme"); got != want {
		t.Fatalf("published %+v, want %+v", got, want)
	}

	e.putScope("chat", `{"tenant":"acme","deploy":{"resources":{"cpu":"500m","memory":"512Mi"}},"pool":{"max_concurrency":4,"pod_concurrency":1}}`)
	e.putScope("solo", scopeCfg(2, 1, 0, 0))
	e.route("chat", "s1")
	e.route("chat", "s2")
	e.route("solo", "s1")
	got := e.ok(http.MethodGet, "/v1/tenants/acme", nil)
	keys(t, got, "tenant", "version", "config", "updated_at", "use", "share")
	cfg := got["config"].(map[string]any)
	if cfg["max_cpu"] != "4" || cfg["max_memory"] != "8Gi" || num(t, cfg, "weight") != 3 || cfg["max_idle_pods"] != nil {
		t.Fatalf("GET answered %v", got)
	}
	use := got["use"].(map[string]any)
	keys(t, use, "pods", "cpu", "memory", "sessions", "idle_pods")
	if use["cpu"] != "1" || use["memory"] != "1Gi" || num(t, use, "pods") != 2 || num(t, use, "sessions") != 2 || num(t, use, "idle_pods") != 0 {
		t.Fatalf("acme's use %v, want chat's two pods of 500m and 512Mi with a session each", use)
	}
	if v := num(t, e.ok(http.MethodPut, "/v1/tenants/acme", `{}`), "version"); v != 2 {
		t.Fatalf("second PUT at version %d, want 2", v)
	}
	if got, _ := limits(t, st, "acme"); got != warmpool.Unlimited() {
		t.Fatalf("an empty config published %+v, want no limit, weight 1", got)
	}

	// A tenant a scope names (by default, its own id) and that has no quotas has no
	// limit; one that nothing names is not found.
	solo := e.ok(http.MethodGet, "/v1/tenants/solo", nil)
	if num(t, solo, "version") != 0 || num(t, solo["config"].(map[string]any), "weight") != 1 ||
		num(t, solo["use"].(map[string]any), "pods") != 1 || num(t, solo["use"].(map[string]any), "sessions") != 1 {
		t.Fatalf("a tenant without quotas: %v", solo)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/tenants/nobody", nil), http.StatusNotFound, warmpool.CodeTenantNotFound, "nobody")

	e.ok(http.MethodPut, "/v1/tenants/beta", `{"max_idle_pods":0}`)
	first := e.ok(http.MethodGet, "/v1/tenants?limit=1", nil)
	if list := first["tenants"].([]any); len(list) != 1 || list[0].(map[string]any)["tenant"] != "acme" || first["next"] != "acme" {
		t.Fatalf("first page %v", first)
	}
	last := e.ok(http.MethodGet, "/v1/tenants?limit=1&after=acme", nil)
	if list := last["tenants"].([]any); len(list) != 1 || list[0].(map[string]any)["tenant"] != "beta" || last["next"] != nil {
		t.Fatalf("last page %v", last)
	}
	if all := e.ok(http.MethodGet, "/v1/tenants", nil); len(all["tenants"].([]any)) != 2 || all["next"] != nil {
		t.Fatalf("GET /v1/tenants answered %v, want acme and beta on one page", all)
	}

	if d := e.ok(http.MethodDelete, "/v1/tenants/acme", nil); d["tenant"] != "acme" || num(t, d, "version") != 3 {
		t.Fatalf("DELETE answered %v", d)
	}
	if l, ok := limits(t, st, "acme"); ok {
		t.Fatalf("the deleted tenant's limits are still published: %+v", l)
	}
	if after := e.ok(http.MethodGet, "/v1/tenants/acme", nil); num(t, after, "version") != 0 || num(t, after["use"].(map[string]any), "pods") != 2 {
		t.Fatalf("after the delete, chat's tenant: %v, want it without quotas, its use counted", after)
	}
	if tenant := e.ok(http.MethodGet, "/v1/scopes/chat/config", nil)["config"].(map[string]any)["tenant"]; tenant != "acme" {
		t.Fatalf("the delete changed chat's tenant to %v", tenant)
	}
	e.wantErr(e.do(http.MethodDelete, "/v1/tenants/acme", nil), http.StatusNotFound, warmpool.CodeTenantNotFound, "acme")
	if v := num(t, e.ok(http.MethodPut, "/v1/tenants/acme", `{"max_pods":1}`), "version"); v != 4 {
		t.Fatalf("a PUT after the delete at version %d, want 4 (the delete is version 3)", v)
	}
}

// Bad input gets a VALIDATION naming what is wrong, and stores nothing.
func TestTenantValidation(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	for _, c := range []struct{ path, body, names string }{
		{"/v1/tenants/acme", `{"max_cpu":"lots"}`, "max_cpu: must be a Kubernetes quantity"},
		{"/v1/tenants/acme", `{"max_cpu":"-1"}`, "max_cpu: must not be negative"},
		{"/v1/tenants/acme", `{"max_cpu":4}`, "max_cpu"},
		{"/v1/tenants/acme", `{"max_memory":"-1Gi"}`, "max_memory: must not be negative"},
		{"/v1/tenants/acme", `{"max_memory":"9E"}`, "max_memory"},
		{"/v1/tenants/acme", `{"weight":0}`, "weight: must be between 1 and 1000"},
		{"/v1/tenants/acme", `{"weight":1001}`, "weight"},
		{"/v1/tenants/acme", `{"max_pods":-1}`, "max_pods: must be between 0"},
		{"/v1/tenants/acme", `{"max_sessions":1.5}`, "max_sessions"},
		{"/v1/tenants/acme", `{"max_idle_pods":"2"}`, "max_idle_pods"},
		{"/v1/tenants/acme", `{"max_pod":1}`, "max_pod"},
		{"/v1/tenants/acme", `{"Weight":2}`, "Weight"},
		{"/v1/tenants/acme", `[]`, "body"},
		{"/v1/tenants/acme", `{"max_pods":1`, ""},
		{"/v1/tenants/Bad_Id", `{}`, "tenant"},
	} {
		e.wantErr(e.do(http.MethodPut, c.path, c.body), http.StatusBadRequest, warmpool.CodeValidation, c.names)
	}
	both := e.wantErr(e.do(http.MethodPut, "/v1/tenants/acme", `{"max_cpu":"x","weight":0}`), http.StatusBadRequest, warmpool.CodeValidation)
	if msg := both["message"].(string); !strings.Contains(msg, "max_cpu") || !strings.Contains(msg, "weight") {
		t.Fatalf("every fault named at once: %q", msg)
	}
	for _, p := range []string{"/v1/tenants?limit=0", "/v1/tenants?limit=501", "/v1/tenants?limit=x", "/v1/tenants?after=Bad_Id"} {
		e.wantErr(e.do(http.MethodGet, p, nil), http.StatusBadRequest, warmpool.CodeValidation)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/tenants/Bad_Id", nil), http.StatusBadRequest, warmpool.CodeValidation, "tenant")
	e.wantErr(e.do(http.MethodDelete, "/v1/tenants/acme", `{"x":1}`), http.StatusBadRequest, warmpool.CodeValidation)
	if list := e.ok(http.MethodGet, "/v1/tenants", nil)["tenants"].([]any); len(list) != 0 {
		t.Fatalf("refused puts stored %v", list)
	}
}

// Every tenant call is an admin call: the gateway token gets 403, no token 401.
func TestTenantCallsAreAdmin(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withTokens("gw-token", "admin-token"))
	calls := []apiCall{
		{http.MethodPut, "/v1/tenants/acme", `{"max_pods":1}`},
		{http.MethodGet, "/v1/tenants/acme", ""},
		{http.MethodGet, "/v1/tenants", ""},
		{http.MethodDelete, "/v1/tenants/acme", ""},
	}
	for _, c := range calls {
		e.wantErr(e.do(c.method, c.path, c.body, bearer("gw-token")), http.StatusForbidden, warmpool.CodeForbidden, "admin token")
		e.wantErr(e.do(c.method, c.path, c.body, noAuth), http.StatusUnauthorized, warmpool.CodeUnauthorized)
		e.ok(c.method, c.path, c.body, bearer("admin-token"))
	}
}

// share is the tenant's weight over the sum of the weights of the tenants with quotas;
// a tenant without quotas counts its own weight, 1.
func TestTenantShare(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.ok(http.MethodPut, "/v1/tenants/a", `{}`)
	e.ok(http.MethodPut, "/v1/tenants/b", `{"weight":3}`)
	e.putScope("c", scopeCfg(2, 1, 0, 0))
	for tenant, want := range map[string]float64{"a": 0.25, "b": 0.75, "c": 0.2} {
		got := e.ok(http.MethodGet, "/v1/tenants/"+tenant, nil)["share"]
		if f, err := got.(json.Number).Float64(); err != nil || f != want {
			t.Errorf("share of %s = %v, want %v", tenant, got, want)
		}
	}
}

// Quotas another replica stored are published by this one's config feed: those stored
// before it started, at its start; a put and a delete afterwards, as they come.
func TestTenantFeed(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	ctx := context.Background()
	two := int64(2)
	if _, err := b.Store.PutTenant(ctx, "early", warmpool.TenantConfig{MaxPods: &two, Weight: 1}); err != nil {
		t.Fatal(err)
	}
	srv, _ := testserver.Serve(t, b.Config("replica-a"))
	followCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Sweeper.Follow(followCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Follow = %v, want context.Canceled", err)
		}
	})
	awaitLimits := func(why, tenant string, want *warmpool.TenantLimits) {
		t.Helper()
		await.True(t, 10*time.Second, fmt.Sprintf("%s: %s's limits %+v", why, tenant, want), func() bool {
			got, ok := limits(t, srv.Store(), tenant)
			if want == nil {
				return !ok
			}
			return ok && got == *want
		})
	}
	early := warmpool.Unlimited()
	early.Pods = 2
	awaitLimits("published at the start", "early", &early)

	cpu := "500m"
	if _, err := b.Store.PutTenant(ctx, "late", warmpool.TenantConfig{MaxCPU: &cpu, Weight: 7}); err != nil {
		t.Fatal(err)
	}
	late := warmpool.Unlimited()
	late.MilliCPU, late.Weight = 500, 7
	awaitLimits("the feed's put", "late", &late)
	if _, err := b.Store.DeleteTenant(ctx, "early"); err != nil {
		t.Fatal(err)
	}
	awaitLimits("the feed's delete", "early", nil)
}

// A tenant's quota refuses a route over it with 429 QUOTA_EXCEEDED, the quota's name,
// limit and use in details, a Retry-After, and the refusals counter; a route of a
// session bound already goes on; once a session ends and the tenant's scopes are
// balanced, the route goes through. The quota spans the tenant's scopes.
func TestTenantQuotaRefusesRoutes(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.ok(http.MethodPut, "/v1/tenants/acme", `{"max_sessions":2}`)
	cfg := `{"tenant":"acme","deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":4,"pod_concurrency":1}}`
	e.putScope("chat", cfg)
	e.putScope("code", cfg)
	e.route("chat", "s1")
	e.route("code", "s2")
	r := e.do(http.MethodPost, "/v1/scopes/chat/sessions", map[string]string{"session_id": "s3"})
	eo := e.wantErr(r, http.StatusTooManyRequests, warmpool.CodeQuotaExceeded, "acme", "max_sessions")
	d := eo["details"].(map[string]any)
	keys(t, d, "tenant", "quota", "limit", "use")
	if d["tenant"] != "acme" || d["quota"] != "max_sessions" || num(t, d, "limit") != 2 || num(t, d, "use") != 2 || r.header.Get("Retry-After") == "" {
		t.Fatalf("refusal %v", r)
	}
	e.route("chat", "s1")
	body := string(e.do(http.MethodGet, "/metrics", nil).raw)
	if !strings.Contains(body, `warmpool_tenant_quota_refusals_total{tenant="acme"} 1`) {
		t.Fatalf("no refusal counted for acme in /metrics")
	}

	e.ok(http.MethodDelete, "/v1/scopes/code/sessions/s2", nil)
	if err := e.srv.Tenants.Balance(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.route("chat", "s3")
	if use := e.ok(http.MethodGet, "/v1/tenants/acme", nil)["use"].(map[string]any); num(t, use, "sessions") != 2 {
		t.Fatalf("acme's use %v, want its 2 sessions", use)
	}
}

// --max-pods-total caps every scope's pods together, whatever their tenants: under a
// cap of 2, two cold routes of two tenants each deploy a pod, and a third tenant's is
// refused with max_pods_total, its limit and use and a Retry-After; when a pod goes,
// the third tenant's route deploys one.
func TestMaxPodsTotalRefusesRoutes(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, func(c *server.Config) { c.MaxPodsTotal = 2 })
	cfg := `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":4,"pod_concurrency":1}}`
	for _, s := range []string{"a", "b", "c"} {
		e.putScope(s, cfg)
	}
	if err := e.srv.Tenants.Balance(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.route("a", "s1")
	e.route("b", "s2")
	r := e.do(http.MethodPost, "/v1/scopes/c/sessions", map[string]string{"session_id": "s3"})
	eo := e.wantErr(r, http.StatusTooManyRequests, warmpool.CodeQuotaExceeded, "max_pods_total")
	d := eo["details"].(map[string]any)
	if d["tenant"] != "c" || d["quota"] != "max_pods_total" || num(t, d, "limit") != 2 || num(t, d, "use") != 2 || r.header.Get("Retry-After") == "" {
		t.Fatalf("refusal %v", r)
	}
	pool := e.ok(http.MethodGet, "/v1/scopes/a/pool", nil)["pods"].([]any)
	pod := pool[0].(map[string]any)["pod_id"].(string)
	if _, err := e.srv.Store().PodPurge(context.Background(), "a", pod, "test", nil); err != nil {
		t.Fatal(err)
	}
	e.route("c", "s3")
}

// A tenant's max_idle_pods caps the warm pools of its scopes together: two scopes of
// min_idle_pods 2 under max_idle_pods 3 refill 3 pods in all, and GET shows them idle.
func TestTenantMaxIdlePodsCapsRefills(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.ok(http.MethodPut, "/v1/tenants/acme", `{"max_idle_pods":3}`)
	cfg := `{"tenant":"acme","deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":8,"pod_concurrency":1,"min_idle_pods":2}}`
	e.putScope("chat", cfg)
	e.putScope("code", cfg)
	ctx := context.Background()
	if err := e.srv.Tenants.Balance(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := e.srv.Sweeper.Autoscale(ctx); err != nil {
			t.Fatal(err)
		}
	}
	await.True(t, 10*time.Second, "acme's 3 idle pods", func() bool {
		use := e.ok(http.MethodGet, "/v1/tenants/acme", nil)["use"].(map[string]any)
		return num(t, use, "idle_pods") == 3
	})
	if n := len(e.fake.Deploys()); n != 3 {
		t.Fatalf("%d warm deploys under max_idle_pods 3, want 3", n)
	}
}
