package server_test

import (
	"context"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/harness/testserver"
	"github.com/warmpool/warmpool/internal/testing/invariant"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/server"
)

// sweep runs the due sweep of the scope's shard on the replica, as its sweeper would
// on its next tick.
func sweep(tb testing.TB, srv *server.Server, scope string) {
	tb.Helper()
	if err := srv.Sweeper.SweepShard(context.Background(), redisstore.DueShard(scope)); err != nil {
		tb.Fatalf("sweep: %v", err)
	}
}

// checkInvariants checks the SPEC §6 invariants on a scope's pool, deleted or not,
// against cfg (the scope's last config) and its deploy_ver.
func checkInvariants(tb testing.TB, store *redisstore.Store, scope string, cfg warmpool.ScopeConfig, settled bool) {
	tb.Helper()
	snap, err := store.Snapshot(context.Background(), scope)
	if err != nil {
		tb.Fatal(err)
	}
	if v := invariant.Violations(snap, cfg, []string{cfg.Deploy.DeployVer()}, settled); len(v) > 0 {
		tb.Fatalf("invariants of %s: %v", scope, v)
	}
}

// scopeKeys lists the keys of a scope in Redis, but for those that expire by
// themselves (a purged pod's tombstone, a session's lock, answer caches).
func scopeKeys(tb testing.TB, e *env, scope string) []string {
	tb.Helper()
	var all []string
	err := e.r.ForEachServer(context.Background(), func(ctx context.Context, c *redis.Client) error {
		ks, err := c.Keys(ctx, e.r.Prefix+"{"+scope+"}:*").Result()
		all = append(all, ks...)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for _, k := range all {
		name := strings.TrimPrefix(k, e.r.Prefix+"{"+scope+"}:")
		if !strings.HasPrefix(name, "gone:") && !strings.HasPrefix(name, "slock:") && !strings.HasPrefix(name, "idem") {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// The contract of DELETE /v1/scopes/{scope} (SPEC §10): an admin call (403 with the
// gateway token); 404 for an unknown scope and again after the delete; 400 for a bad
// force; 200 {"scope_id","pods"}. The scope takes no route, acquire, config read or
// status at once; its idle pod is deleted at once and its busy pod when its session
// ends; then only its tombstone is left in Redis. A later PUT starts at the next
// version and routes on a new pod.
func TestDeleteScope(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withTokens("gw-token", "admin-token"))
	e.token = "admin-token" // accepted everywhere
	admin := bearer("admin-token")
	cfg := scopeCfg(4, 1, 0, 1)
	e.putScope("gone", cfg)
	e.putScope("gone", cfg)
	e.putScope("kept", cfg)
	busy := e.route("gone", "s1")["pod_id"].(string)
	idle := e.route("gone", "s2")["pod_id"].(string)
	e.ok(http.MethodDelete, "/v1/scopes/gone/sessions/s2", nil)

	e.wantErr(e.do(http.MethodDelete, "/v1/scopes/gone", nil, bearer("gw-token")), http.StatusForbidden, warmpool.CodeForbidden, "admin token")
	e.wantErr(e.do(http.MethodDelete, "/v1/scopes/nope", nil, admin), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodDelete, "/v1/scopes/gone?force=maybe", nil, admin), http.StatusBadRequest, warmpool.CodeValidation, "force")
	if n := len(e.fake.Deleted()); n != 0 {
		t.Fatalf("refused deletes deleted %d pods", n)
	}

	got := e.ok(http.MethodDelete, "/v1/scopes/gone", nil, admin)
	keys(t, got, "scope_id", "pods")
	if got["scope_id"] != "gone" || num(t, got, "pods") != 2 {
		t.Fatalf("delete answered %v, want scope gone with 2 pods", got)
	}
	if d := e.fake.Deleted(); !slices.Equal(d, []string{idle}) {
		t.Fatalf("pods deleted with the scope: %v, want the idle one %s only", d, idle)
	}
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/gone/sessions", map[string]string{"session_id": "s3"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/gone/sessions", map[string]string{"session_id": "s1"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/gone/pods/acquire", `{}`), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/gone/config", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/gone/pool", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodDelete, "/v1/scopes/gone", nil, admin), http.StatusNotFound, warmpool.CodeScopeNotFound)
	list := e.ok(http.MethodGet, "/v1/scopes", nil)["scopes"].([]any)
	if len(list) != 1 || list[0].(map[string]any)["scope_id"] != "kept" {
		t.Fatalf("GET /v1/scopes after the delete: %v, want kept only", list)
	}
	// The first scrape after the delete drops the scope's counters and histograms
	// (and has no gauge of it); the next has none of its series.
	e.do(http.MethodGet, "/metrics", nil)
	if m := e.do(http.MethodGet, "/metrics", nil); strings.Contains(string(m.raw), `scope="gone"`) || !strings.Contains(string(m.raw), `warmpool_pods{scope="kept"`) {
		t.Fatalf("metrics after the delete still have series of the deleted scope, or none of kept:\n%s", m.raw)
	}
	if h := e.ok(http.MethodGet, "/v1/scopes/gone/config/history", nil)["versions"].([]any); len(h) != 2 {
		t.Fatalf("history after the delete has %d versions, want 2", len(h))
	}
	stored := configOf(t, cfg)
	checkInvariants(t, e.srv.Store(), "gone", stored, false)

	// The busy pod's session goes on (touch) and, once it ends, the pod goes.
	if r := e.ok(http.MethodPost, "/v1/scopes/gone/sessions/s1/touch", nil); r["touched"] != true {
		t.Fatalf("touch of a session of the deleted scope: %v", r)
	}
	sweep(t, e.srv, "gone")
	if d := e.fake.Deleted(); len(d) != 1 {
		t.Fatalf("a sweep with the session still bound deleted %v", d)
	}
	e.ok(http.MethodDelete, "/v1/scopes/gone/sessions/s1", nil)
	sweep(t, e.srv, "gone")
	if d := e.fake.Deleted(); !slices.Equal(d, []string{idle, busy}) {
		t.Fatalf("after its session ended: pods deleted %v, want %s then %s", d, idle, busy)
	}
	checkInvariants(t, e.srv.Store(), "gone", stored, true)
	if k := scopeKeys(t, e, "gone"); !slices.Equal(k, []string{"config", "fence"}) {
		t.Fatalf("keys of the deleted scope once its pods are gone: %v, want the tombstone (config, fence)", k)
	}

	// A sync publishes live scopes only; a later PUT makes the scope live again.
	if n := num(t, e.ok(http.MethodPost, "/v1/config/sync", nil, admin), "scopes"); n != 1 {
		t.Fatalf("sync published %d scopes, want 1", n)
	}
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/gone/sessions", map[string]string{"session_id": "s4"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
	if v := num(t, e.putScope("gone", cfg), "version"); v != 3 {
		t.Fatalf("PUT after the delete: version %d, want 3", v)
	}
	pod := e.route("gone", "s5")["pod_id"].(string)
	if pod == busy || pod == idle {
		t.Fatalf("the scope live again routed to %s, a pod of its deleted life", pod)
	}
	checkInvariants(t, e.srv.Store(), "gone", stored, false)
}

// configOf is a scope config document as the server stores it.
func configOf(tb testing.TB, doc string) warmpool.ScopeConfig {
	tb.Helper()
	cfg, err := httpx.DecodeScopeConfig(strings.NewReader(doc))
	if err != nil {
		tb.Fatal(err)
	}
	return cfg
}

// With force=true every pod goes at once, busy ones too: their sessions are released
// and their holds gone, and nothing of the scope is left but its tombstone.
func TestDeleteScopeForce(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	cfg := scopeCfg(4, 2, 0, 1)
	e.putScope("forced", cfg)
	a := e.route("forced", "s1")["pod_id"].(string)
	// Acquire takes no slot of a busy pod: the hold is on a second pod.
	hold := e.ok(http.MethodPost, "/v1/scopes/forced/pods/acquire", `{}`)
	b := hold["pod_id"].(string)

	if got := e.ok(http.MethodDelete, "/v1/scopes/forced?force=true", nil); num(t, got, "pods") != 2 {
		t.Fatalf("delete answered %v, want 2 pods", got)
	}
	deleted := e.fake.Deleted()
	if !slices.Contains(deleted, a) || !slices.Contains(deleted, b) {
		t.Fatalf("force deleted %v, want the busy pods %s and %s", deleted, a, b)
	}
	if n := len(e.fake.Pods()); n != 0 {
		t.Fatalf("%d pods left in the driver after a forced delete", n)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/forced/sessions/s1", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	// Nothing of the scope is left: a touch finds no scope.
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/forced/sessions/s1/touch", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	// The hold's release finds nothing: its pod is gone.
	r := e.do(http.MethodPost, "/v1/scopes/forced/pods/"+b+"/release", map[string]string{"hold_id": hold["hold_id"].(string)})
	if r.status == http.StatusOK && r.obj(t)["released"] == true {
		t.Fatalf("a hold of a pod deleted by force was released: %v", r)
	}
	if k := scopeKeys(t, e, "forced"); !slices.Equal(k, []string{"config", "fence"}) {
		t.Fatalf("keys after a forced delete: %v, want the tombstone (config, fence)", k)
	}
}

// A scope deleted through one replica routes on none: the other answers 404 at once,
// and neither its full reconcile nor a config sync brings the scope back. A PUT through
// the other replica makes it live again on both.
func TestDeleteScopeOnEveryReplica(t *testing.T) {
	t.Parallel()
	b := testserver.NewBacking(t)
	srvA, tsA := testserver.Serve(t, b.Config("replica-a"))
	srvB, tsB := testserver.Serve(t, b.Config("replica-b"))
	a := &env{t: t, srv: srvA, ts: tsA, r: b.Redis, fake: b.Fake, client: &http.Client{Timeout: 30 * time.Second}}
	other := &env{t: t, srv: srvB, ts: tsB, r: b.Redis, fake: b.Fake, client: &http.Client{Timeout: 30 * time.Second}}
	cfg := scopeCfg(4, 1, 0, 1)
	a.putScope("shared", cfg)
	pod := other.route("shared", "s1")["pod_id"].(string)
	other.ok(http.MethodDelete, "/v1/scopes/shared/sessions/s1", nil)

	if n := num(t, a.ok(http.MethodDelete, "/v1/scopes/shared", nil), "pods"); n != 1 {
		t.Fatalf("delete counted %d pods, want 1", n)
	}
	other.wantErr(other.do(http.MethodPost, "/v1/scopes/shared/sessions", map[string]string{"session_id": "s2"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
	ctx := context.Background()
	if !runJob(t, srvB, ctx, srvB.Sweeper.ReconcileJob()) {
		t.Fatal("reconcile did not run")
	}
	other.ok(http.MethodPost, "/v1/config/sync", nil)
	other.wantErr(other.do(http.MethodPost, "/v1/scopes/shared/sessions", map[string]string{"session_id": "s2"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
	a.wantErr(a.do(http.MethodGet, "/v1/scopes/shared/pool", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	if !slices.Contains(b.Fake.Deleted(), pod) {
		t.Fatalf("the idle pod %s was not deleted: %v", pod, b.Fake.Deleted())
	}

	if v := num(t, other.putScope("shared", cfg), "version"); v != 2 {
		t.Fatalf("PUT after the delete: version %d, want 2", v)
	}
	if got := a.route("shared", "s3")["pod_id"]; got == pod {
		t.Fatalf("routed to %s, the deleted pod", got)
	}
}

// historyHook is a config store that runs its armed function (once) before its next
// History: a write that lands between a caller's reads.
type historyHook struct {
	warmpool.ConfigStore
	before atomic.Pointer[func()]
}

// History runs the armed function, if any, then reads the history.
func (h *historyHook) History(ctx context.Context, scope string, q warmpool.HistoryQuery) (warmpool.HistoryPage, error) {
	if f := h.before.Swap(nil); f != nil {
		(*f)()
	}
	return h.ConfigStore.History(ctx, scope, q)
}

// halfDeleted serves a replica whose scope "half" (one pod, one session) is deleted in
// the config store only, as when Redis failed after the store took a delete (the call
// answered 503): Redis still routes to it. With unpublished, a second version was
// stored before the delete but never published (Redis failed for that PUT too): Redis
// serves the first. The replica's config store is the hook.
func halfDeleted(t *testing.T, unpublished bool) (*env, *historyHook) {
	t.Helper()
	b := testserver.NewBacking(t)
	hook := &historyHook{ConfigStore: b.Store}
	cfg := b.Config("replica")
	cfg.Store = hook
	srv, ts := testserver.Serve(t, cfg)
	e := &env{t: t, srv: srv, ts: ts, r: b.Redis, fake: b.Fake, client: &http.Client{Timeout: 30 * time.Second}}
	e.putScope("half", scopeCfg(4, 1, 0, 1))
	e.route("half", "s1")
	if unpublished {
		if _, err := b.Store.Put(context.Background(), "half", configOf(t, scopeCfg(4, 1, 0, 2))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Store.Delete(context.Background(), "half"); err != nil {
		t.Fatal(err)
	}
	e.route("half", "s1")
	return e, hook
}

// A stored delete that never reached Redis is finished by reconcile: the scope stops
// routing.
func TestReconcileFinishesAStoredDelete(t *testing.T) {
	t.Parallel()
	e, _ := halfDeleted(t, false)
	if !runJob(t, e.srv, context.Background(), e.srv.Sweeper.ReconcileJob()) {
		t.Fatal("reconcile did not run")
	}
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/half/sessions", map[string]string{"session_id": "s2"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
}

// A stored delete that never reached Redis is finished by the DELETE's retry: it
// answers 200 with the scope's pods, and the scope stops routing at once, not at the
// next reconcile. A third delete is 404.
func TestDeleteRetryFinishesAStoredDelete(t *testing.T) {
	t.Parallel()
	e, _ := halfDeleted(t, false)
	got := e.ok(http.MethodDelete, "/v1/scopes/half", nil)
	if got["scope_id"] != "half" || num(t, got, "pods") != 1 {
		t.Fatalf("the retried delete answered %v, want scope half with 1 pod", got)
	}
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/half/sessions", map[string]string{"session_id": "s2"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodDelete, "/v1/scopes/half", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
}

// The retry finishes a stored delete of a version Redis never had too, deleting the
// older version Redis serves: a retry that answered 404 left the scope routing until
// the next reconcile.
func TestDeleteRetryFinishesAnUnpublishedVersion(t *testing.T) {
	t.Parallel()
	e, _ := halfDeleted(t, true)
	got := e.ok(http.MethodDelete, "/v1/scopes/half", nil)
	if got["scope_id"] != "half" || num(t, got, "pods") != 1 {
		t.Fatalf("the retried delete answered %v, want scope half with 1 pod", got)
	}
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/half/sessions", map[string]string{"session_id": "s2"}), http.StatusNotFound, warmpool.CodeScopeNotFound)
}

// A PUT that makes a half-deleted scope live again while a DELETE retry reads its
// history wins: the retry answers 404 and the new version routes. (The retry must not
// take the new version for the deleted one and delete it in Redis while the config
// store serves it.)
func TestDeleteRetryLeavesAScopeLiveAgain(t *testing.T) {
	t.Parallel()
	e, hook := halfDeleted(t, false)
	cfg := configOf(t, scopeCfg(4, 1, 0, 1))
	put := make(chan error, 1)
	again := func() {
		_, err := e.srv.Scopes.Put(context.Background(), "half", cfg)
		put <- err
	}
	hook.before.Store(&again)
	e.wantErr(e.do(http.MethodDelete, "/v1/scopes/half", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	if err := <-put; err != nil {
		t.Fatalf("the PUT during the retry: %v", err)
	}
	if got := e.ok(http.MethodGet, "/v1/scopes/half/config", nil); num(t, got, "version") != 2 {
		t.Fatalf("config after the PUT: %v, want version 2", got)
	}
	e.route("half", "s2")
}

// A pod still busy when its scope was deleted stays retired when a PUT makes the scope
// live again, with the same deploy: a new session goes to a new pod, never to it, and
// it is deleted once its session ends.
func TestPutAfterDeleteLeavesOldPodsRetired(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	cfg := scopeCfg(4, 2, 0, 1)
	e.putScope("again", cfg)
	old := e.route("again", "s1")["pod_id"].(string)
	e.ok(http.MethodDelete, "/v1/scopes/again", nil)
	e.putScope("again", cfg)

	if pod := e.route("again", "s2")["pod_id"]; pod == old {
		t.Fatalf("a new session landed on %s, a pod of the scope's deleted life", old)
	}
	stored := configOf(t, cfg)
	checkInvariants(t, e.srv.Store(), "again", stored, false)
	e.ok(http.MethodDelete, "/v1/scopes/again/sessions/s1", nil)
	sweep(t, e.srv, "again")
	if d := e.fake.Deleted(); !slices.Equal(d, []string{old}) {
		t.Fatalf("after its session ended: deleted %v, want the retired pod %s", d, old)
	}
	if n := len(e.pool("again")["pods"].([]any)); n != 1 {
		t.Fatalf("pool has %d pods, want the new one only", n)
	}
}

// A route waiting in the queue of a scope that is deleted learns at once that the
// scope is gone (404), instead of waiting out wait_timeout_s. The delete drops every
// waiter, a crashed replica's leftover too (SPEC §6.5: nothing leaks): the waiter and
// queue keys are gone as soon as it answers, and once the scope's last pod is gone
// only its tombstone is left.
func TestDeleteScopeWakesItsWaiters(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("full", scopeCfg(1, 1, 4, 30))
	e.route("full", "s1")
	// A waiter of a replica that died while it waited: its entries stay until their
	// deadline, an hour away.
	k := e.srv.Store().Keys().Scope("full")
	ctx := context.Background()
	deadline := float64(e.clock.Now().Add(time.Hour).UnixMilli())
	if err := e.r.Client.ZAdd(ctx, k.Waiters, redis.Z{Score: deadline, Member: "crashed"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.r.Client.ZAdd(ctx, k.Queue, redis.Z{Score: 0, Member: "crashed"}).Err(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan resp, 1)
	go func() {
		waited <- e.do(http.MethodPost, "/v1/scopes/full/sessions", map[string]string{"session_id": "s2"})
	}()
	await.True(t, 10*time.Second, "the second route to queue", func() bool { return num(t, e.pool("full"), "waiters") == 2 })
	e.ok(http.MethodDelete, "/v1/scopes/full", nil)
	if left := scopeKeys(t, e, "full"); slices.Contains(left, "waiters") || slices.Contains(left, "queue") {
		t.Fatalf("keys once the delete answered: %v, want no waiters and no queue", left)
	}
	select {
	case r := <-waited:
		e.wantErr(r, http.StatusNotFound, warmpool.CodeScopeNotFound)
		if r.took > 10*time.Second {
			t.Fatalf("the waiter took %s to learn the scope was deleted", r.took)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter did not return after the delete")
	}
	e.ok(http.MethodDelete, "/v1/scopes/full/sessions/s1", nil)
	sweep(t, e.srv, "full")
	if left := scopeKeys(t, e, "full"); !slices.Equal(left, []string{"config", "fence"}) {
		t.Fatalf("keys of the deleted scope once its pod is gone: %v, want the tombstone (config, fence)", left)
	}
}
