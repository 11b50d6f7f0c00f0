package server_test

// HTTP tests of one complete replica (server.New: SM, RM, config service, router and
// middleware) over a real HTTP connection: every route and every error code of SPEC §3.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/internal/httpx"
	"github.com/warmpool/warmpool/internal/testing/await"
	"github.com/warmpool/warmpool/internal/testing/testredis"
	"github.com/warmpool/warmpool/redisstore"
	"github.com/warmpool/warmpool/server"
	"github.com/warmpool/warmpool/sweeper"
	"github.com/warmpool/warmpool/ui"
)

var deployVerRe = regexp.MustCompile(`^[0-9a-f]{16}$`)

func TestConfigPutGet(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)

	put := e.putScope("agents.a-1", `{"deploy":{"image":"registry.example/agent:1.4","resources":{"cpu":"250m"}},"pool":{"max_concurrency":4}}`)
	keys(t, put, "scope_id", "version", "deploy_ver")
	if put["scope_id"] != "agents.a-1" || num(t, put, "version") != 1 || !deployVerRe.MatchString(put["deploy_ver"].(string)) {
		t.Fatalf("first put: %v", put)
	}
	dv1 := put["deploy_ver"].(string)

	// Pool only (class B): a new version, the same deploy_ver.
	put = e.putScope("agents.a-1", `{"deploy":{"image":"registry.example/agent:1.4","resources":{"cpu":"250m"}},"pool":{"max_concurrency":6}}`)
	if num(t, put, "version") != 2 || put["deploy_ver"] != dv1 {
		t.Fatalf("pool-only change: %v, want version 2 and deploy_ver %s", put, dv1)
	}
	// A deploy field (class A): a new deploy_ver.
	put = e.putScope("agents.a-1", `{"deploy":{"image":"registry.example/agent:1.5","resources":{"cpu":"250m"}},"pool":{"max_concurrency":6}}`)
	if num(t, put, "version") != 3 || put["deploy_ver"] == dv1 || !deployVerRe.MatchString(put["deploy_ver"].(string)) {
		t.Fatalf("deploy change: %v, want version 3 and a new deploy_ver", put)
	}
	dv3 := put["deploy_ver"].(string)

	got := e.ok(http.MethodGet, "/v1/scopes/agents.a-1/config", nil)
	hasKeys(t, got, "scope_id", "version", "deploy_ver", "config")
	if got["scope_id"] != "agents.a-1" || num(t, got, "version") != 3 || got["deploy_ver"] != dv3 {
		t.Fatalf("get: %v", got)
	}
	cfg := got["config"].(map[string]any)
	deploy, pool := cfg["deploy"].(map[string]any), cfg["pool"].(map[string]any)
	res := deploy["resources"].(map[string]any)
	// The memory default is stored, not filled in later by one path only.
	if res["memory"] != warmpool.DefaultMemory || res["cpu"] != "250m" || deploy["image"] != "registry.example/agent:1.5" {
		t.Fatalf("stored deploy: %v", deploy)
	}
	if num(t, pool, "max_concurrency") != 6 || num(t, pool, "pod_concurrency") != warmpool.DefaultPodConcurrency ||
		num(t, pool, "queue_size") != warmpool.DefaultQueueSize {
		t.Fatalf("stored pool: %v", pool)
	}

	// An explicitly empty memory request gets the same default.
	e.putScope("mem", `{"deploy":{"resources":{"memory":""}}}`)
	got = e.ok(http.MethodGet, "/v1/scopes/mem/config", nil)
	if m := got["config"].(map[string]any)["deploy"].(map[string]any)["resources"].(map[string]any)["memory"]; m != "512Mi" {
		t.Fatalf("memory = %v, want 512Mi", m)
	}

	// The published config is routable at once.
	b := e.route("agents.a-1", "s1")
	if b["deploy_ver"] != dv3 {
		t.Fatalf("routed to deploy_ver %v, want %s", b["deploy_ver"], dv3)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("keep", `{"pool":{"max_concurrency":4}}`)
	cases := []struct {
		name, body, field string
	}{
		{"zero pod_concurrency", `{"pool":{"pod_concurrency":0}}`, "pool.pod_concurrency"},
		{"max below pod", `{"pool":{"max_concurrency":1,"pod_concurrency":2}}`, "pool.max_concurrency"},
		{"negative queue", `{"pool":{"queue_size":-1}}`, "pool.queue_size"},
		{"wait too long", `{"pool":{"wait_timeout_s":100000}}`, "pool.wait_timeout_s"},
		{"min idle above max pods", `{"pool":{"max_concurrency":4,"pod_concurrency":2,"min_idle_pods":3}}`, "pool.min_idle_pods"},
		{"zero pod ttl", `{"pool":{"pod_ttl_s":0}}`, "pool.pod_ttl_s"},
		{"zero session ttl", `{"pool":{"session_ttl_s":0}}`, "pool.session_ttl_s"},
		{"parallel above max pods", `{"pool":{"max_parallel_deploys":99}}`, "pool.max_parallel_deploys"},
		{"port", `{"deploy":{"port":70000}}`, "deploy.port"},
		{"memory", `{"deploy":{"resources":{"memory":"lots"}}}`, "deploy.resources.memory"},
		{"cpu", `{"deploy":{"resources":{"cpu":"-1"}}}`, "deploy.resources.cpu"},
		{"image with space", `{"deploy":{"image":"a b"}}`, "deploy.image"},
		{"namespace", `{"deploy":{"namespace":"Agents"}}`, "deploy.namespace"},
		{"container name", `{"deploy":{"container_name":"a_b"}}`, "deploy.container_name"},
		{"sse path", `{"deploy":{"sse_path":"sse"}}`, "deploy.sse_path"},
		{"health path", `{"deploy":{"health_path":"/a b"}}`, "deploy.health_path"},
		{"ready timeout", `{"deploy":{"ready_timeout_s":0}}`, "deploy.ready_timeout_s"},
		{"env name", `{"deploy":{"env":{"1BAD":"x"}}}`, "deploy.env"},
		{"wrong type", `{"pool":{"max_concurrency":"8"}}`, "max_concurrency"},
		{"float for int", `{"pool":{"queue_size":1.5}}`, "queue_size"},
		{"huge number", `{"pool":{"queue_size":1e400}}`, "queue_size"},
		{"list for string", `{"deploy":{"image":["a"]}}`, "image"},
		{"unknown top field", `{"deploy":{},"pools":{}}`, "pools"},
		{"unknown nested field", `{"deploy":{"imagee":"x"}}`, "imagee"},
		{"duplicate key", `{"pool":{"queue_size":1,"max_concurrency":4,"queue_size":9}}`, "pool.queue_size: duplicate key"},
		{"duplicate section", `{"deploy":{},"pool":{},"deploy":{"image":"x"}}`, "deploy: duplicate key"},
		{"malformed", `{"deploy":`, "body"},
		{"bad token", `{"deploy":{]}`, "body"},
		{"trailing data", `{} {}`, "trailing"},
		{"trailing garbage", `{"pool":{}}x`, "trailing"},
		{"array body", `[]`, "object"},
		{"string body", `"config"`, "object"},
		{"null body", `null`, "object"},
		{"number body", `42`, "object"},
		{"empty body", ``, "body"},
		{"blank body", " \n\t", "body"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := *e
			e.t = t
			for _, scope := range []string{"keep", "fresh"} {
				r := e.do(http.MethodPut, "/v1/scopes/"+scope+"/config", c.body)
				e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, c.field)
			}
		})
	}
	// Nothing was stored by a rejected put.
	if v := num(t, e.ok(http.MethodGet, "/v1/scopes/keep/config", nil), "version"); v != 1 {
		t.Fatalf("version %d after rejected puts, want 1", v)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/fresh/config", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
}

// scopeRoutes are the routes under /v1/scopes/{scope}: %[1]s is the scope, %[2]s the
// session or pod id.
var scopeRoutes = []struct {
	method, path string
	body         string
}{
	{http.MethodPut, "/v1/scopes/%[1]s/config", `{}`},
	{http.MethodGet, "/v1/scopes/%[1]s/config", ""},
	{http.MethodPost, "/v1/scopes/%[1]s/sessions", `{"session_id":"s1"}`},
	{http.MethodGet, "/v1/scopes/%[1]s/sessions/%[2]s", ""},
	{http.MethodDelete, "/v1/scopes/%[1]s/sessions/%[2]s", ""},
	{http.MethodPost, "/v1/scopes/%[1]s/sessions/%[2]s/touch", ""},
	{http.MethodPost, "/v1/scopes/%[1]s/pods/acquire", `{}`},
	{http.MethodPost, "/v1/scopes/%[1]s/pods/%[2]s/release", `{"hold_id":"h1"}`},
	{http.MethodPost, "/v1/scopes/%[1]s/pods/%[2]s/touch", `{"hold_id":"h1"}`},
	{http.MethodGet, "/v1/scopes/%[1]s/pool", ""},
}

// luaID looks like a Lua injection: ids are never pasted into scripts, so it is only
// ever a bad id.
const luaID = `a'..redis.call('FLUSHALL')..'`

func TestBadScopeIDs(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	e.route("ok", "s1")
	bad := []string{
		"UPPER",
		"Ok",
		strings.Repeat("a", 64),
		luaID,
		`a"]]..redis.call("FLUSHALL")--`,
		"{x}",
		"a{ok}b",
		"-a",
		"a-",
		"a_b!",
		"a b",
		"a%b",
		"a/b",
		"ä",
		"a\x00b",
		"a\nb",
	}
	for _, id := range bad {
		for _, rt := range scopeRoutes {
			path := fmt.Sprintf(rt.path, url.PathEscape(id), "s1")
			r := e.do(rt.method, path, rt.body)
			e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, "scope")
		}
	}
	// 63 chars is the longest valid id.
	long := strings.Repeat("a", 63)
	e.putScope(long, scopeCfg(4, 2, 0, 1))
	e.route(long, "s1")

	// Nothing reached Redis: the scope routed before still routes, with its binding.
	if b := e.route("ok", "s1"); b["new"] != false {
		t.Fatalf("binding lost after bad ids: %v", b)
	}
	n, err := e.r.Client.Exists(context.Background(), e.r.Prefix+"epoch").Result()
	if err != nil || n != 1 {
		t.Fatalf("epoch key: %d, %v", n, err)
	}
}

func TestBadSessionIDs(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	bad := []string{
		strings.Repeat("s", 129),
		"a b",
		" ",
		luaID,
		"{x}",
		"a/b",
		"sess\u00e9",
		"a\tb",
	}
	sessionRoutes := []struct{ method, path string }{
		{http.MethodGet, "/v1/scopes/ok/sessions/%s"},
		{http.MethodDelete, "/v1/scopes/ok/sessions/%s"},
		{http.MethodPost, "/v1/scopes/ok/sessions/%s/touch"},
	}
	for _, id := range bad {
		for _, rt := range sessionRoutes {
			r := e.do(rt.method, fmt.Sprintf(rt.path, url.PathEscape(id)), nil)
			e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, "session")
		}
		r := e.do(http.MethodPost, "/v1/scopes/ok/sessions", map[string]string{"session_id": id})
		e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, "session_id")
	}
	// Also the empty and missing session id, and bad request ids (body and header).
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":""}`), http.StatusBadRequest, warmpool.CodeValidation, "session_id")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/sessions", `{}`), http.StatusBadRequest, warmpool.CodeValidation, "session_id")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s1","request_id":"a b"}`), http.StatusBadRequest, warmpool.CodeValidation, "request_id")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s1","session_id":"s2"}`), http.StatusBadRequest, warmpool.CodeValidation, "session_id: duplicate key")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/sessions", `{"request_id":"r1","session_id":"s1","request_id":"r2"}`), http.StatusBadRequest, warmpool.CodeValidation, "request_id: duplicate key")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/pods/acquire", `{"request_id":"r1","request_id":"r1"}`), http.StatusBadRequest, warmpool.CodeValidation, "request_id: duplicate key")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s1"}`, header{"Idempotency-Key", luaID}), http.StatusBadRequest, warmpool.CodeValidation, "request_id")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/pods/acquire", `{"request_id":"`+strings.Repeat("r", 129)+`"}`), http.StatusBadRequest, warmpool.CodeValidation, "request_id")
	// SPEC §11.5: a body request_id and another Idempotency-Key on one call.
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s1","request_id":"r1"}`, header{"Idempotency-Key", "r2"}), http.StatusBadRequest, warmpool.CodeValidation, "request_id", "Idempotency-Key")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/pods/acquire", `{"request_id":"r1"}`, header{"Idempotency-Key", "r2"}), http.StatusBadRequest, warmpool.CodeValidation, "request_id", "Idempotency-Key")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/pods/BAD_POD/release", `{"hold_id":"h1"}`), http.StatusBadRequest, warmpool.CodeValidation, "pod")
	for _, body := range []string{`{}`, `{"hold_id":""}`, `{"hold_id":"a b"}`, `{"hold_id":7}`} {
		for _, verb := range []string{"release", "touch"} {
			e.wantErr(e.do(http.MethodPost, "/v1/scopes/ok/pods/p1/"+verb, body), http.StatusBadRequest, warmpool.CodeValidation, "hold_id")
		}
	}
	if got := e.pool("ok")["pods"].([]any); len(got) != 0 {
		t.Fatalf("bad requests deployed pods: %v", got)
	}

	// 128 chars of the whole alphabet is valid.
	long := strings.Repeat("aZ09._:-", 16)
	b := e.route("ok", long)
	if b["session_id"] != long || b["new"] != true {
		t.Fatalf("route of a 128-char id: %v", b)
	}
	e.ok(http.MethodGet, "/v1/scopes/ok/sessions/"+long, nil)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withToken("s3cret-token"))
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	e.route("ok", "s1")

	v1 := []struct{ method, path, body string }{
		{http.MethodGet, "/v1/scopes", ""},
		{http.MethodPost, "/v1/config/sync", ""},
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s2"}`},
		{http.MethodGet, "/v1/scopes/ok/sessions/s1", ""},
		{http.MethodDelete, "/v1/scopes/ok/sessions/s1", ""},
		{http.MethodPost, "/v1/scopes/ok/sessions/s1/touch", ""},
		{http.MethodPost, "/v1/scopes/ok/pods/acquire", `{}`},
		{http.MethodPost, "/v1/scopes/ok/pods/p1/release", `{"hold_id":"h1"}`},
		{http.MethodPost, "/v1/scopes/ok/pods/p1/touch", `{"hold_id":"h1"}`},
		{http.MethodGet, "/v1/scopes/ok/pool", ""},
		{http.MethodGet, "/v1/scopes/ok/config", ""},
		{http.MethodPut, "/v1/scopes/ok/config", `{}`},
		// Auth comes before validation: a bad id says nothing to a stranger.
		{http.MethodGet, "/v1/scopes/BAD/pool", ""},
	}
	wrong := []header{
		{"Authorization", ""},
		{"Authorization", "Bearer wrong"},
		{"Authorization", "Bearer s3cret-token2"},
		{"Authorization", "Bearer s3cret-toke"},
		{"Authorization", "s3cret-token"},
		{"Authorization", "Basic czNjcmV0LXRva2Vu"},
	}
	for _, c := range v1 {
		for _, h := range wrong {
			r := e.do(c.method, c.path, c.body, h)
			e.wantErr(r, http.StatusUnauthorized, warmpool.CodeUnauthorized)
			if got := r.header.Get("WWW-Authenticate"); got != "Bearer" {
				t.Fatalf("%v: WWW-Authenticate %q, want Bearer", r, got)
			}
		}
	}
	// The scheme is matched case-insensitively.
	for _, scheme := range []string{"bearer", "BEARER", "Bearer"} {
		e.ok(http.MethodGet, "/v1/scopes/ok/sessions/s1", nil, header{"Authorization", scheme + " s3cret-token"})
	}
	// Nothing changed: s1 is still bound, s2 never was.
	e.ok(http.MethodGet, "/v1/scopes/ok/sessions/s1", nil)
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/ok/sessions/s2", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)

	// The operations endpoints stay open.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := e.do(http.MethodGet, p, nil, header{"Authorization", ""}); r.status != http.StatusOK {
			t.Fatalf("without a token: %v", r)
		}
	}
}

func TestScopeNotFound(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("known", scopeCfg(4, 2, 0, 1))
	for _, rt := range scopeRoutes {
		if rt.method == http.MethodPut {
			continue // a put creates the scope
		}
		r := e.do(rt.method, fmt.Sprintf(rt.path, "nosuch", "s1"), rt.body)
		e.wantErr(r, http.StatusNotFound, warmpool.CodeScopeNotFound, "nosuch")
	}
	// With a request id, acquire takes another path.
	r := e.do(http.MethodPost, "/v1/scopes/nosuch/pods/acquire", `{"request_id":"r1"}`)
	e.wantErr(r, http.StatusNotFound, warmpool.CodeScopeNotFound)
	r = e.do(http.MethodPost, "/v1/scopes/nosuch/sessions", `{"session_id":"s1","request_id":"r1"}`)
	e.wantErr(r, http.StatusNotFound, warmpool.CodeScopeNotFound)
	if n := e.fake.DeployCount(); n != 0 {
		t.Fatalf("%d deploys for an unknown scope", n)
	}
}

func TestSessionNotFound(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/ok/sessions/nobody", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	e.route("ok", "s1")
	e.ok(http.MethodDelete, "/v1/scopes/ok/sessions/s1", nil)
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/ok/sessions/s1", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
}

func TestConfigSync(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	if got := e.ok(http.MethodPost, "/v1/config/sync", nil); num(t, got, "scopes") != 0 {
		t.Fatalf("sync of no scopes: %v", got)
	}
	e.putScope("a", scopeCfg(4, 2, 0, 1))
	e.putScope("b", scopeCfg(4, 2, 0, 1))
	got := e.ok(http.MethodPost, "/v1/config/sync", nil)
	keys(t, got, "scopes")
	if num(t, got, "scopes") != 2 {
		t.Fatalf("sync: %v", got)
	}

	// Another replica's sync holds the lock.
	ctx := context.Background()
	store := redisstore.NewStore(e.r.Client, e.r.Prefix)
	key := e.r.Prefix + "lock:config_sync"
	if key != store.Keys().Lock("config_sync") {
		t.Fatalf("sync lock key %q, want %q", store.Keys().Lock("config_sync"), key)
	}
	held, err := store.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatalf("obtain: %v", err)
	}
	token, _ := e.r.Client.Get(ctx, key).Result()
	r := e.do(http.MethodPost, "/v1/config/sync", nil)
	e.wantErr(r, http.StatusConflict, warmpool.CodeConfigSyncBusy)
	// The busy sync did not take the other holder's lock.
	if tok, _ := e.r.Client.Get(ctx, key).Result(); tok != token {
		t.Fatalf("lock token %q after a busy sync, want the holder's %q", tok, token)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got := e.ok(http.MethodPost, "/v1/config/sync", nil); num(t, got, "scopes") != 2 {
		t.Fatalf("sync after release: %v", got)
	}
	// A finished sync released its lock.
	if n, _ := e.r.Client.Exists(ctx, key).Result(); n != 0 {
		t.Fatal("sync lock left behind")
	}
}

func TestPayloadTooLarge(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	// Valid JSON padded with whitespace to exactly the limit passes; one byte more does not.
	pad := func(doc string, n int) string { return doc + strings.Repeat(" ", n-len(doc)) }
	cases := []struct{ method, path, doc string }{
		{http.MethodPut, "/v1/scopes/ok/config", scopeCfg(4, 2, 0, 1)},
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s1"}`},
		{http.MethodPost, "/v1/scopes/ok/pods/acquire", `{}`},
	}
	for _, c := range cases {
		e.ok(c.method, c.path, pad(c.doc, httpx.MaxBody))
		r := e.do(c.method, c.path, pad(c.doc, httpx.MaxBody+1))
		e.wantErr(r, http.StatusRequestEntityTooLarge, warmpool.CodePayloadTooLarge)
		// A big body that is not JSON at all, and one far over the limit.
		r = e.do(c.method, c.path, strings.Repeat("x", 3<<20))
		e.wantErr(r, http.StatusRequestEntityTooLarge, warmpool.CodePayloadTooLarge)
		r = e.do(c.method, c.path, `{"session_id":"`+strings.Repeat("a", httpx.MaxBody)+`"}`)
		e.wantErr(r, http.StatusRequestEntityTooLarge, warmpool.CodePayloadTooLarge)
	}
	if v := num(t, e.ok(http.MethodGet, "/v1/scopes/ok/config", nil), "version"); v != 2 {
		t.Fatalf("version %d, want 2 (one accepted put at the limit)", v)
	}
}

func TestNoPodAvailable(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	// One pod of one session, no waiting room.
	e.putScope("tiny", scopeCfg(1, 1, 0, 5))
	first := e.route("tiny", "s1")
	r := e.do(http.MethodPost, "/v1/scopes/tiny/sessions", `{"session_id":"s2"}`)
	e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)
	if r.took > 2*time.Second {
		t.Fatalf("NO_POD_AVAILABLE took %s: it must not wait", r.took)
	}
	// Acquire at max_pods fails the same way.
	r = e.do(http.MethodPost, "/v1/scopes/tiny/pods/acquire", nil)
	e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)
	p := e.pool("tiny")
	if num(t, p, "waiters") != 0 || num(t, p, "placeholders") != 0 || len(p["pods"].([]any)) != 1 {
		t.Fatalf("pool after refusals: %v", p)
	}
	// The bound session is untouched.
	if b := e.route("tiny", "s1"); b["pod_id"] != first["pod_id"] || b["new"] != false {
		t.Fatalf("s1 after refusals: %v", b)
	}
}

func TestQueueFullAndWake(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("q", scopeCfg(1, 1, 1, 20))
	first := e.route("q", "s1")

	// s2 waits in the queue (size 1) ...
	var wg sync.WaitGroup
	var queued resp
	wg.Add(1)
	go func() {
		defer wg.Done()
		queued = e.do(http.MethodPost, "/v1/scopes/q/sessions", `{"session_id":"s2"}`)
	}()
	await.True(t, 5*time.Second, "s2 queued", func() bool { return num(t, e.pool("q"), "waiters") == 1 })

	// ... so s3 finds the queue full at once.
	r := e.do(http.MethodPost, "/v1/scopes/q/sessions", `{"session_id":"s3"}`)
	e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeQueueFull)
	if r.took > 2*time.Second {
		t.Fatalf("QUEUE_FULL took %s", r.took)
	}

	// Ending s1 wakes s2, which gets s1's pod.
	ended := time.Now()
	if got := e.ok(http.MethodDelete, "/v1/scopes/q/sessions/s1", nil); got["released"] != true {
		t.Fatalf("end: %v", got)
	}
	wg.Wait()
	if queued.status != http.StatusOK {
		t.Fatalf("queued route: %v", queued)
	}
	b := queued.obj(t)
	if b["pod_id"] != first["pod_id"] || b["new"] != true || b["session_id"] != "s2" {
		t.Fatalf("queued route got %v, want s1's pod %v", b, first["pod_id"])
	}
	if took := time.Since(ended); took > 2*time.Second {
		t.Fatalf("woken after %s", took)
	}
	if p := e.pool("q"); num(t, p, "waiters") != 0 {
		t.Fatalf("waiter left behind: %v", p)
	}
}

func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("w", scopeCfg(1, 1, 2, 1))
	e.route("w", "s1")
	r := e.do(http.MethodPost, "/v1/scopes/w/sessions", `{"session_id":"s2"}`)
	e.wantErr(r, http.StatusGatewayTimeout, warmpool.CodeWaitTimeout, "place 1 in line")
	if r.took < 900*time.Millisecond || r.took > 5*time.Second {
		t.Fatalf("WAIT_TIMEOUT after %s, want about wait_timeout_s (1s)", r.took)
	}
	if p := e.pool("w"); num(t, p, "waiters") != 0 {
		t.Fatalf("waiter left behind: %v", p)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/w/sessions/s2", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
}

func TestDeployFailed(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("f", scopeCfg(4, 2, 0, 1))
	e.fake.FailNext(1, "ErrImagePull: registry.example/agent:nope not found")
	r := e.do(http.MethodPost, "/v1/scopes/f/sessions", `{"session_id":"s1"}`)
	e.wantErr(r, http.StatusBadGateway, warmpool.CodeDeployFailed, "ErrImagePull")
	p := e.pool("f")
	if len(p["pods"].([]any)) != 0 || num(t, p, "placeholders") != 0 || num(t, p, "followers") != 0 || num(t, p, "waiters") != 0 {
		t.Fatalf("failed deploy left state behind: %v", p)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/f/sessions/s1", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)

	// The refill backs off (SPEC §11.3): for 5 s a route or an acquire that would
	// deploy answers 502 at once with the last reason and Retry-After, and GET …/pool
	// shows the backoff.
	for _, c := range []call{
		{http.MethodPost, "/v1/scopes/f/sessions", `{"session_id":"s1"}`},
		{http.MethodPost, "/v1/scopes/f/pods/acquire", `{}`},
	} {
		r = e.do(c.method, c.path, c.body)
		eo := e.wantErr(r, http.StatusBadGateway, warmpool.CodeDeployFailed, "ErrImagePull", "backs off")
		if eo["retry_after"] != json.Number("5") || r.header.Get("Retry-After") != "5" || r.took > time.Second {
			t.Fatalf("held back by the backoff: %v in %v, want retry_after 5 and an answer under a second", r, r.took)
		}
	}
	backoff := e.pool("f")["backoff"].(map[string]any)
	if backoff["failures"] != json.Number("1") || !strings.Contains(backoff["last_error"].(string), "ErrImagePull") ||
		backoff["until"] != e.clock.Now().Add(5*time.Second).UTC().Format(time.RFC3339Nano) {
		t.Fatalf("pool backoff = %v, want one failure for 5 s with its reason", backoff)
	}

	// Acquire reports a failure of its own deploy as a route does.
	e.clock.Advance(5 * time.Second)
	e.fake.FailNext(1, "crash loop")
	r = e.do(http.MethodPost, "/v1/scopes/f/pods/acquire", `{}`)
	e.wantErr(r, http.StatusBadGateway, warmpool.CodeDeployFailed, "crash loop")

	// The next deploy, after the 10 s backoff, works and ends the backoff.
	e.clock.Advance(10 * time.Second)
	if b := e.route("f", "s1"); b["new"] != true {
		t.Fatalf("route after failures: %v", b)
	}
	if backoff := e.pool("f")["backoff"].(map[string]any); backoff["failures"] != json.Number("0") || backoff["until"] != nil {
		t.Fatalf("pool backoff after a deploy = %v, want none", backoff)
	}
}

type call struct{ method, path, body string }

// storeDown lists calls that need Redis; every one must answer STORE_UNAVAILABLE.
// pod is a registered pod of scope "ok".
func storeDown(pod string) []call {
	return []call{
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s2"}`},
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s1"}`},
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"s3","request_id":"r3"}`},
		{http.MethodPost, "/v1/scopes/ok/sessions/s1/touch", ""},
		{http.MethodDelete, "/v1/scopes/ok/sessions/s1", ""},
		{http.MethodPost, "/v1/scopes/ok/pods/acquire", `{}`},
		{http.MethodPost, "/v1/scopes/ok/pods/acquire", `{"request_id":"r4"}`},
		{http.MethodPost, "/v1/scopes/ok/pods/" + pod + "/release", `{"hold_id":"h1"}`},
		{http.MethodPost, "/v1/scopes/ok/pods/" + pod + "/touch", `{"hold_id":"h1"}`},
	}
}

// Not parallel: while the Redis is stopped, no other test of the package may start a
// miniredis that could take its port.
func TestStoreUnavailableRedisDown(t *testing.T) {
	// A Redis of its own, so that it can be stopped whatever REDIS_ADDR says.
	mini := miniredis.RunT(t)
	e := mustEnv(t, withRedisURL("redis://"+mini.Addr(), "down:"))
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	b := e.route("ok", "s1")
	e.ok(http.MethodGet, "/readyz", nil)

	mini.Close()
	all := append([]call{
		{http.MethodGet, "/v1/scopes/ok/sessions/s1", ""},
		{http.MethodGet, "/v1/scopes/ok/pool", ""},
		{http.MethodGet, "/v1/scopes", ""},
		{http.MethodPost, "/v1/config/sync", ""},
		// Stored in SQLite, but not published: the caller must know.
		{http.MethodPut, "/v1/scopes/ok/config", scopeCfg(6, 2, 0, 1)},
		{http.MethodGet, "/readyz", ""},
	}, storeDown(b["pod_id"].(string))...)
	for _, c := range all {
		r := e.do(c.method, c.path, c.body)
		e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeStoreUnavailable)
		if r.took > time.Second {
			t.Fatalf("%v took %s: must fail fast", r, r.took)
		}
	}
	// Liveness needs no Redis.
	h := e.ok(http.MethodGet, "/healthz", nil)
	keys(t, h, "status", "instance_id")
	if h["status"] != "ok" || h["instance_id"] != testInstance {
		t.Fatalf("healthz: %v", h)
	}
	if r := e.do(http.MethodGet, "/metrics", nil); r.status != http.StatusOK {
		t.Fatalf("metrics with Redis down: %v", r)
	}

	// Redis comes back (with its data): the replica recovers by itself.
	if err := mini.Restart(); err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "ready again", func() bool { return e.do(http.MethodGet, "/readyz", nil).status == http.StatusOK })
	if got := e.route("ok", "s1"); got["pod_id"] != b["pod_id"] || got["new"] != false {
		t.Fatalf("s1 after Redis came back: %v, want %v bound already (keys %v, pool %v)", got, b, mini.Keys(), e.do(http.MethodGet, "/v1/scopes/ok/pool", nil))
	}
}

func TestStoreUnavailableDataLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, loss := range []string{"epoch keys", "every key"} {
		t.Run(loss, func(t *testing.T) {
			e := mustEnv(t)
			// Room for a third pod: after every key is lost, the two pods below are
			// held until session_ttl_s passes (their sessions may still run).
			e.putScope("ok", scopeCfg(6, 2, 0, 1))
			e.route("ok", "s1")
			acq := e.ok(http.MethodPost, "/v1/scopes/ok/pods/acquire", `{}`)

			switch loss {
			case "epoch keys":
				ks := redisstore.NewKeyspace(e.r.Prefix)
				for _, k := range []string{ks.Epoch(), ks.Scope("ok").Epoch} { // one by one: two cluster slots
					if err := e.r.Client.Del(ctx, k).Err(); err != nil {
						t.Fatal(err)
					}
				}
			case "every key":
				if err := e.r.DeleteAll(ctx); err != nil {
					t.Fatal(err)
				}
			}
			calls := append([]call{{http.MethodGet, "/readyz", ""}}, storeDown(acq["pod_id"].(string))...)
			for _, c := range calls {
				r := e.do(c.method, c.path, c.body)
				// Fail closed: never SCOPE_NOT_FOUND (the scope exists) and never a 500.
				e.wantErr(r, http.StatusServiceUnavailable, warmpool.CodeStoreUnavailable)
				if r.took > time.Second {
					t.Fatalf("%v took %s: must fail fast", r, r.took)
				}
			}
			if loss == "every key" {
				for _, p := range []string{"/v1/scopes/ok/pool", "/v1/scopes/ok/sessions/s1"} {
					e.wantErr(e.do(http.MethodGet, p, nil), http.StatusServiceUnavailable, warmpool.CodeStoreUnavailable)
				}
			}
			e.ok(http.MethodGet, "/healthz", nil)

			// Reconcile (the sweeper job) rebuilds the keyspace: ready again.
			if !runJob(t, e.srv, ctx, e.srv.Sweeper.ReconcileJob()) {
				t.Fatal("reconcile did not run")
			}
			e.ok(http.MethodGet, "/readyz", nil)
			e.route("ok", "s9")
		})
	}
}

func TestRouteTouchEndGet(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	put := e.putScope("r", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":4,"pod_concurrency":2,"session_ttl_s":60,"queue_size":0}}`)

	b := e.route("r", "s1")
	keys(t, b, "scope_id", "session_id", "pod_id", "pod_sse_url", "deploy_ver", "new")
	if b["scope_id"] != "r" || b["session_id"] != "s1" || b["new"] != true || b["deploy_ver"] != put["deploy_ver"] ||
		b["pod_id"] == "" || !strings.HasPrefix(b["pod_sse_url"].(string), "http") {
		t.Fatalf("first route: %v", b)
	}
	pod := b["pod_id"]
	again := e.route("r", "s1")
	if again["pod_id"] != pod || again["new"] != false {
		t.Fatalf("second route of s1: %v", again)
	}
	// The second session shares the pod (pod_concurrency 2): first fit, no deploy.
	if b2 := e.route("r", "s2"); b2["pod_id"] != pod || b2["new"] != true {
		t.Fatalf("s2: %v", b2)
	}
	if n := e.fake.DeployCount(); n != 1 {
		t.Fatalf("%d deploys, want 1", n)
	}

	got := e.ok(http.MethodGet, "/v1/scopes/r/sessions/s1", nil)
	keys(t, got, "scope_id", "session_id", "pod_id", "pod_sse_url", "deploy_ver", "new")
	if got["pod_id"] != pod || got["session_id"] != "s1" || got["pod_sse_url"] != b["pod_sse_url"] {
		t.Fatalf("get: %v", got)
	}

	touch := e.ok(http.MethodPost, "/v1/scopes/r/sessions/s1/touch", nil)
	keys(t, touch, "touched")
	if touch["touched"] != true {
		t.Fatalf("touch of a live session: %v", touch)
	}
	if touch := e.ok(http.MethodPost, "/v1/scopes/r/sessions/never/touch", nil); touch["touched"] != false {
		t.Fatalf("touch of an unknown session: %v", touch)
	}

	// s2 expires (s1 was touched 30s in, so it lives on); a touch evicts s2.
	e.clock.Advance(30 * time.Second)
	e.ok(http.MethodPost, "/v1/scopes/r/sessions/s1/touch", nil)
	e.clock.Advance(31 * time.Second)
	if touch := e.ok(http.MethodPost, "/v1/scopes/r/sessions/s2/touch", nil); touch["touched"] != false {
		t.Fatalf("touch of an expired session: %v", touch)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/r/sessions/s2", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	pods := e.pool("r")["pods"].([]any)
	if len(pods) != 1 || num(t, pods[0].(map[string]any), "sessions") != 1 {
		t.Fatalf("pool after eviction: %v", pods)
	}
	if end := e.ok(http.MethodDelete, "/v1/scopes/r/sessions/s2", nil); end["released"] != false {
		t.Fatalf("end of an evicted session: %v", end)
	}

	end := e.ok(http.MethodDelete, "/v1/scopes/r/sessions/s1", nil)
	keys(t, end, "released")
	if end["released"] != true {
		t.Fatalf("end: %v", end)
	}
	if end := e.ok(http.MethodDelete, "/v1/scopes/r/sessions/s1", nil); end["released"] != false {
		t.Fatalf("second end: %v", end)
	}
	// The pod went idle with its last session.
	pp := e.pool("r")["pods"].([]any)[0].(map[string]any)
	if pp["state"] != "idle" || num(t, pp, "sessions") != 0 || pp["idle_since"] == nil {
		t.Fatalf("pod after the last end: %v", pp)
	}
	// And is reused.
	if b := e.route("r", "s3"); b["pod_id"] != pod || e.fake.DeployCount() != 1 {
		t.Fatalf("s3 got %v after %d deploys, want the idle pod %v", b, e.fake.DeployCount(), pod)
	}
}

func TestRouteIdempotency(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	// A waiter queue: concurrent first attempts of one request id may each take a slot
	// (see below), and one that finds the scope full waits for the winner's answer.
	e.putScope("i", scopeCfg(8, 2, 4, 20))

	first := e.ok(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"s1","request_id":"req-1"}`)
	if first["new"] != true {
		t.Fatalf("first: %v", first)
	}
	// A replay gets the first answer, new:true included.
	replay := e.ok(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"s1","request_id":"req-1"}`)
	if fmt.Sprint(replay) != fmt.Sprint(first) {
		t.Fatalf("replay %v, want %v", replay, first)
	}
	// Without the request id it is an ordinary second route.
	if plain := e.route("i", "s1"); plain["new"] != false || plain["pod_id"] != first["pod_id"] {
		t.Fatalf("plain second route: %v", plain)
	}
	// SPEC §11.5: the request id of alice's route, sent by mallory with another
	// session (body or header), or for an acquire, is refused and binds nothing;
	// alice's retry still gets her answer.
	alice := e.ok(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"alice","request_id":"K"}`)
	for _, r := range []resp{
		e.do(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"mallory","request_id":"K"}`),
		e.do(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"mallory"}`, header{"Idempotency-Key", "K"}),
		e.do(http.MethodPost, "/v1/scopes/i/pods/acquire", `{"request_id":"K"}`),
	} {
		e.wantErr(r, http.StatusUnprocessableEntity, warmpool.CodeIdempotencyMismatch, "request id")
	}
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/i/sessions/mallory", nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	if retry := e.ok(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"alice"}`, header{"Idempotency-Key", "K"}); fmt.Sprint(retry) != fmt.Sprint(alice) {
		t.Fatalf("alice's retry: %v, want her answer %v", retry, alice)
	}

	// The Idempotency-Key header works the same.
	k1 := e.ok(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"s2"}`, header{"Idempotency-Key", "key-2"})
	k2 := e.ok(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"s2"}`, header{"Idempotency-Key", "key-2"})
	if k1["new"] != true || fmt.Sprint(k1) != fmt.Sprint(k2) {
		t.Fatalf("header replay: %v then %v", k1, k2)
	}
	// The same id in the body and the header is one request id.
	if both := e.ok(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"s2","request_id":"key-2"}`, header{"Idempotency-Key", "key-2"}); fmt.Sprint(both) != fmt.Sprint(k1) {
		t.Fatalf("body and header replay: %v, want %v", both, k1)
	}
	// Concurrent attempts of one request id get one answer and create one session.
	// (They are not serialised: each may lead or follow a deploy before one binds and
	// the rest replay its answer; with queue_size 0, those that find the scope full
	// answer NO_POD_AVAILABLE instead.)
	var wg sync.WaitGroup
	answers := make([]resp, 6)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = e.do(http.MethodPost, "/v1/scopes/i/sessions", `{"session_id":"s3"}`, header{"Idempotency-Key", "key-3"})
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if a.status != http.StatusOK || a.obj(t)["new"] != true || a.obj(t)["pod_id"] != answers[0].obj(t)["pod_id"] {
			t.Fatalf("concurrent replay: %v (first %v)", a, answers[0])
		}
	}
	sessions := 0
	for _, p := range e.pool("i")["pods"].([]any) {
		sessions += num(t, p.(map[string]any), "sessions")
	}
	if sessions != 4 {
		t.Fatalf("%d sessions, want 4 (s1, alice, s2, s3)", sessions)
	}
	t.Logf("%d deploys for 2 sessions plus 6 concurrent attempts of a third", e.fake.DeployCount())
}

// SPEC §10 holds: an acquire hands out a hold (hold_id, hold_until = now + hold_ttl_s)
// that takes one slot of its pod; a replay of its request id answers the same hold;
// touch extends it; release frees the slot (the pod goes idle with its last); a hold
// that is unknown, released, expired or of another pod is 404 HOLD_NOT_FOUND; an
// expired hold's slot comes back by the expiry sweep.
func TestAcquireRelease(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("a", `{"deploy":{"ready_timeout_s":10},"pool":{"max_concurrency":2,"pod_concurrency":2,"queue_size":0,"hold_ttl_s":60}}`)
	at := func(d time.Duration) string {
		return e.clock.Now().Add(d).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	release := func(pod string, hold any) resp {
		return e.do(http.MethodPost, "/v1/scopes/a/pods/"+pod+"/release", map[string]any{"hold_id": hold})
	}
	touch := func(pod string, hold any) resp {
		return e.do(http.MethodPost, "/v1/scopes/a/pods/"+pod+"/touch", map[string]any{"hold_id": hold})
	}

	acq := e.ok(http.MethodPost, "/v1/scopes/a/pods/acquire", `{"request_id":"acq-1"}`)
	keys(t, acq, "pod_id", "pod_sse_url", "deploy_ver", "source", "hold_id", "hold_until")
	if acq["source"] != warmpool.SourceDeployed || acq["hold_until"] != at(time.Minute) || acq["hold_id"] == "" {
		t.Fatalf("first acquire: %v, want a deployed pod held until %s", acq, at(time.Minute))
	}
	pod, hold := acq["pod_id"].(string), acq["hold_id"]
	if replay := e.ok(http.MethodPost, "/v1/scopes/a/pods/acquire", `{"request_id":"acq-1"}`); fmt.Sprint(replay) != fmt.Sprint(acq) {
		t.Fatalf("acquire replay: %v, want the same hold %v", replay, acq)
	}
	if n := e.fake.DeployCount(); n != 1 {
		t.Fatalf("%d deploys, want 1", n)
	}
	// The hold takes a slot of the pod (pod_concurrency 2, max_pods 1): one session
	// fits beside it, a second does not.
	pp := e.pool("a")["pods"].([]any)[0].(map[string]any)
	if pp["pod_id"] != pod || pp["state"] != "busy" || num(t, pp, "slots") != 1 || num(t, pp, "sessions") != 0 {
		t.Fatalf("held pod: %v, want busy with the hold's slot", pp)
	}
	if b := e.route("a", "s1"); b["pod_id"] != pod {
		t.Fatalf("s1 on %v, want the held pod's free slot", b["pod_id"])
	}
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/a/sessions", `{"session_id":"s2"}`), http.StatusServiceUnavailable, warmpool.CodeNoPodAvailable)

	e.clock.Advance(30 * time.Second)
	if got := e.ok(http.MethodPost, "/v1/scopes/a/pods/"+pod+"/touch", map[string]any{"hold_id": hold}); got["hold_until"] != at(time.Minute) {
		t.Fatalf("touch: %v, want hold_until %s", got, at(time.Minute))
	}
	for _, r := range []resp{release("other-pod", hold), release(pod, "no-such-hold"), touch("other-pod", hold), touch(pod, "no-such-hold")} {
		e.wantErr(r, http.StatusNotFound, warmpool.CodeHoldNotFound)
	}
	rel := release(pod, hold)
	if rel.status != http.StatusOK {
		t.Fatalf("release: %v", rel)
	}
	if got := rel.obj(t); len(got) != 2 || got["released"] != true || got["idle"] != false {
		t.Fatalf("release beside a session: %v, want released and not idle", got)
	}
	e.wantErr(release(pod, hold), http.StatusNotFound, warmpool.CodeHoldNotFound)
	e.wantErr(touch(pod, hold), http.StatusNotFound, warmpool.CodeHoldNotFound)
	e.ok(http.MethodDelete, "/v1/scopes/a/sessions/s1", nil)
	if pp := e.pool("a")["pods"].([]any)[0].(map[string]any); pp["state"] != "idle" || num(t, pp, "slots") != 0 {
		t.Fatalf("pod after its hold and session ended: %v", pp)
	}

	// Warm now; an empty body is fine too. Released as the pod's last slot, it is idle.
	warm := e.ok(http.MethodPost, "/v1/scopes/a/pods/acquire", nil)
	if warm["source"] != warmpool.SourceWarm || warm["pod_id"] != pod || warm["hold_id"] == hold {
		t.Fatalf("second acquire: %v", warm)
	}
	if got := e.ok(http.MethodPost, "/v1/scopes/a/pods/"+pod+"/release", map[string]any{"hold_id": warm["hold_id"]}); got["idle"] != true {
		t.Fatalf("release of the last slot: %v", got)
	}

	// A hold nobody releases expires: touch and release find it gone, and the expiry
	// sweep gives its slot back even though nothing else runs.
	lost := e.ok(http.MethodPost, "/v1/scopes/a/pods/acquire", nil)
	e.clock.Advance(61 * time.Second)
	e.wantErr(touch(pod, lost["hold_id"]), http.StatusNotFound, warmpool.CodeHoldNotFound)
	for _, j := range e.srv.Sweeper.Jobs() {
		if j.Name == sweeper.DueJobName(redisstore.DueShard("a")) && !runJob(t, e.srv, context.Background(), j) {
			t.Fatal("the due job of the scope did not run")
		}
	}
	if pp := e.pool("a")["pods"].([]any)[0].(map[string]any); pp["state"] != "idle" || num(t, pp, "slots") != 0 {
		t.Fatalf("pod after its hold expired: %v, want idle", pp)
	}
	e.wantErr(release(pod, lost["hold_id"]), http.StatusNotFound, warmpool.CodeHoldNotFound)

	e.wantErr(e.do(http.MethodPost, "/v1/scopes/a/pods/acquire", `{"request":"x"}`), http.StatusBadRequest, warmpool.CodeValidation, "request")
	e.wantErr(e.do(http.MethodPost, "/v1/scopes/a/pods/acquire", `[`), http.StatusBadRequest, warmpool.CodeValidation, "body")
}

func TestPoolShape(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	put := e.putScope("p", scopeCfg(5, 2, 2, 20))

	p := e.pool("p")
	keys(t, p, "scope_id", "deploy_ver", "max_pods", "pods", "placeholders", "followers", "waiters", "backoff", "target_idle", "warm_policy", "demand")
	if num(t, p, "target_idle") != 0 || p["warm_policy"] != "static" || p["demand"] != nil {
		t.Fatalf("target of a static pool with min_idle_pods 0: %v", p)
	}
	if p["scope_id"] != "p" || p["deploy_ver"] != put["deploy_ver"] || num(t, p, "max_pods") != 3 || len(p["pods"].([]any)) != 0 {
		t.Fatalf("empty pool: %v", p)
	}

	// A deploy in flight is a placeholder; a second route is its follower.
	release := e.fake.Hold()
	defer release()
	var wg sync.WaitGroup
	routes := make([]resp, 2)
	wg.Add(1)
	go func() {
		defer wg.Done()
		routes[0] = e.do(http.MethodPost, "/v1/scopes/p/sessions", `{"session_id":"s1"}`)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.fake.WaitInFlight(ctx, 1); err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		routes[1] = e.do(http.MethodPost, "/v1/scopes/p/sessions", `{"session_id":"s2"}`)
	}()
	await.True(t, 5*time.Second, "one placeholder and one follower", func() bool {
		p := e.pool("p")
		return num(t, p, "placeholders") == 1 && num(t, p, "followers") == 1
	})
	release()
	wg.Wait()
	for _, r := range routes {
		if r.status != http.StatusOK {
			t.Fatalf("route: %v", r)
		}
	}
	if routes[0].obj(t)["pod_id"] != routes[1].obj(t)["pod_id"] {
		t.Fatalf("leader and follower on different pods: %v / %v", routes[0], routes[1])
	}

	// A busy pod and an idle one.
	held := e.ok(http.MethodPost, "/v1/scopes/p/pods/acquire", nil)
	p = e.pool("p")
	if num(t, p, "placeholders") != 0 || num(t, p, "followers") != 0 || num(t, p, "waiters") != 0 {
		t.Fatalf("counts after the deploys: %v", p)
	}
	pods := p["pods"].([]any)
	if len(pods) != 2 {
		t.Fatalf("pods: %v", pods)
	}
	second := pods[1].(map[string]any)["pod_id"].(string)
	if second != held["pod_id"] {
		t.Fatalf("second pod %s, want the held %v", second, held["pod_id"])
	}
	e.ok(http.MethodPost, "/v1/scopes/p/pods/"+second+"/release", map[string]any{"hold_id": held["hold_id"]})
	states := map[string]map[string]any{}
	for _, x := range e.pool("p")["pods"].([]any) {
		pp := x.(map[string]any)
		hasKeys(t, pp, "pod_id", "state", "sessions", "deploy_ver", "pod_sse_url", "idle_since")
		if pp["deploy_ver"] != put["deploy_ver"] || !strings.HasPrefix(pp["pod_sse_url"].(string), "http") {
			t.Fatalf("pod: %v", pp)
		}
		states[pp["state"].(string)] = pp
	}
	busy, idle := states["busy"], states["idle"]
	if busy == nil || idle == nil || num(t, busy, "sessions") != 2 || busy["idle_since"] != nil ||
		num(t, idle, "sessions") != 0 || idle["pod_id"] != second {
		t.Fatalf("pod states: %v", states)
	}
	since, err := time.Parse(time.RFC3339Nano, idle["idle_since"].(string))
	if err != nil || !since.Equal(e.clock.Now()) {
		t.Fatalf("idle_since %v (%v), want the clock's %v", idle["idle_since"], err, e.clock.Now())
	}
}

func TestScopesList(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	if got := e.ok(http.MethodGet, "/v1/scopes", nil); len(got["scopes"].([]any)) != 0 {
		t.Fatalf("no scopes yet: %v", got)
	}
	e.putScope("b", scopeCfg(4, 2, 0, 1))
	e.putScope("a", scopeCfg(4, 2, 0, 1))
	e.route("a", "s1")
	e.route("a", "s2")
	e.route("a", "s3")
	e.clock.Advance(ui.ListAge) // the list is a pass over every scope up to ui.ListAge old
	got := e.ok(http.MethodGet, "/v1/scopes", nil)
	keys(t, got, "scopes", "next")
	list := got["scopes"].([]any)
	if len(list) != 2 {
		t.Fatalf("scopes: %v", list)
	}
	a, b := list[0].(map[string]any), list[1].(map[string]any)
	for _, s := range []map[string]any{a, b} {
		hasKeys(t, s, "scope_id", "deploy_ver", "version", "pods", "idle_pods", "busy_pods", "sessions", "deploying", "waiters")
	}
	if a["scope_id"] != "a" || num(t, a, "pods") != 2 || num(t, a, "sessions") != 3 || num(t, a, "busy_pods") != 2 || num(t, a, "idle_pods") != 0 {
		t.Fatalf("scope a: %v", a)
	}
	if b["scope_id"] != "b" || num(t, b, "pods") != 0 || num(t, b, "sessions") != 0 {
		t.Fatalf("scope b: %v", b)
	}
}

// GET /v1/scopes pages (SPEC §12.4): limit scopes (1 to 500, default 100) after the
// cursor after, in the order of their ids, and next, the cursor of the next page, null
// on the last; a bad limit or after is 400 VALIDATION naming it. The pages come from
// the pool page's shared pass over every scope: however many callers page, Redis is
// read once a Refresh (here, with the clock stopped, once).
func TestScopesPages(t *testing.T) {
	t.Parallel()
	calls := &testredis.Counter{}
	e := mustEnv(t, func(c *server.Config) { c.Redis.AddHook(calls) })
	for _, id := range []string{"e", "c", "a", "d", "b"} {
		e.putScope(id, scopeCfg(4, 2, 0, 1))
	}
	page := func(query string) (ids string, next any) {
		t.Helper()
		got := e.ok(http.MethodGet, "/v1/scopes"+query, nil)
		keys(t, got, "scopes", "next")
		var l []string
		for _, s := range got["scopes"].([]any) {
			l = append(l, s.(map[string]any)["scope_id"].(string))
		}
		return strings.Join(l, ","), got["next"]
	}
	for _, c := range []struct {
		query, ids string
		next       any
	}{
		{"", "a,b,c,d,e", nil},
		{"?limit=2", "a,b", "b"},
		{"?limit=2&after=b", "c,d", "d"},
		{"?after=d&limit=2", "e", nil},
		{"?limit=5", "a,b,c,d,e", nil},
		{"?limit=4", "a,b,c,d", "d"},
		{"?after=e", "", nil},
		{"?after=bb&limit=1", "c", "c"}, // a cursor of a scope gone since is still a place in the order
		{"?limit=500", "a,b,c,d,e", nil},
	} {
		if ids, next := page(c.query); ids != c.ids || next != c.next {
			t.Errorf("GET /v1/scopes%s: %q next %v, want %q next %v", c.query, ids, next, c.ids, c.next)
		}
	}
	before := calls.Count()
	for range 20 {
		page("?limit=2&after=a")
	}
	if n := calls.Count() - before; n != 0 {
		t.Errorf("20 pages within a Refresh sent Redis %d round trips, want none: they share one pass", n)
	}
	for _, c := range []struct{ query, names string }{
		{"?limit=0", "limit"}, {"?limit=501", "limit"}, {"?limit=x", "limit"}, {"?limit=1&limit=2", "limit"}, {"?limit=", "limit"},
		{"?after=", "after"}, {"?after=B%20ad", "after"}, {"?after=a&after=b", "after"},
	} {
		eo := e.wantErr(e.do(http.MethodGet, "/v1/scopes"+c.query, nil), http.StatusBadRequest, warmpool.CodeValidation)
		if msg := eo["message"].(string); !strings.HasPrefix(msg, c.names+":") {
			t.Errorf("GET /v1/scopes%s: %q does not name %s", c.query, msg, c.names)
		}
	}
}

func TestOperations(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	h := e.ok(http.MethodGet, "/healthz", nil)
	keys(t, h, "status", "instance_id")
	if h["status"] != "ok" || h["instance_id"] != testInstance {
		t.Fatalf("healthz: %v", h)
	}
	if r := e.ok(http.MethodGet, "/readyz", nil); r["status"] != "ready" {
		t.Fatalf("readyz: %v", r)
	}

	e.putScope("m", scopeCfg(1, 1, 0, 1))
	e.route("m", "s1")
	e.do(http.MethodPost, "/v1/scopes/m/sessions", `{"session_id":"s2"}`) // NO_POD_AVAILABLE
	r := e.do(http.MethodGet, "/metrics", nil)
	if r.status != http.StatusOK {
		t.Fatalf("metrics: %v", r)
	}
	text := string(r.raw)
	for _, want := range []string{
		`warmpool_routes_total{scope="m",source="deployed"} 1`,
		`warmpool_route_duration_seconds_count{source="deployed"} 1`,
		`warmpool_route_errors_total{code="NO_POD_AVAILABLE",scope="m"} 1`,
		`warmpool_pods{scope="m",state="busy"} 1`,
		`warmpool_pods{scope="m",state="idle"} 0`,
		`warmpool_sessions{scope="m"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// Unknown routes and methods answer in the envelope too.
	e.wantErr(e.do(http.MethodGet, "/v2/nothing", nil), http.StatusNotFound, "NOT_FOUND")
	e.wantErr(e.do(http.MethodPatch, "/v1/scopes/m/pool", nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
}

// TestNoInternalOnBadInput throws garbage at every route and requires an answer that is
// never a 500 and, when an error, is the envelope with the status of its code.
func TestNoInternalOnBadInput(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	// No waiting anywhere: a full scope answers at once.
	e.putScope("known", scopeCfg(4, 2, 0, 1))
	e.putScope("known-put", scopeCfg(4, 2, 0, 1))
	survivor := e.route("known", "survivor")

	type route struct{ method, path string }
	var routes []route
	for _, rt := range scopeRoutes {
		routes = append(routes, route{rt.method, rt.path})
	}
	routes = append(routes,
		route{http.MethodGet, "/v1/scopes"}, route{http.MethodPost, "/v1/config/sync"},
		route{http.MethodGet, "/healthz"}, route{http.MethodGet, "/readyz"}, route{http.MethodGet, "/metrics"},
	)
	scopes := []string{"known", "nosuch", "UPPER", url.PathEscape(luaID), "", "%00", "a%2Fb", "%7Bx%7D", "%ff", "..", strings.Repeat("a", 300)}
	seconds := []string{"s1", "p-1", strings.Repeat("s", 129), url.PathEscape(luaID), "%20", "%7Bx%7D", "", "a%2F..%2Fb", "%00", "%ff"}
	bodies := []string{
		"", "{", "}", "[", "null", "true", "0", "-1", `""`, "[]", "{}", "{}{}", "{} x", `{"a":1}`,
		`{"session_id":1}`, `{"session_id":null}`, `{"session_id":"s1","session_id":"s2"}`,
		`{"session_id":["s1"]}`, `{"session_id":{"x":1}}`, `{"session_id":"s1","request_id":7}`,
		`{"session_id":"` + luaID + `"}`, `{"session_id":"s1","request_id":"` + luaID + `"}`,
		`{"request_id":""}`, `{"request_id":null}`, `{"deploy":null,"pool":null}`,
		`{"deploy":{"command":null,"args":null,"env":null}}`, `{"deploy":{"env":{"":""}}}`,
		`{"deploy":{"resources":null}}`, `{"pool":{"max_concurrency":9223372036854775807}}`,
		`{"pool":{"max_concurrency":-9223372036854775808,"pod_concurrency":-1}}`,
		`{"pool":{"max_concurrency":1e400}}`, `{"deploy":{"port":1.0e1}}`,
		`{"deploy":{"image":"\u0000"}}`, "{\"session_id\":\"\xff\xfe\"}", "\xef\xbb\xbf{}",
		`{"session_id":"s1"` + strings.Repeat(" ", 1000) + `}`,
		strings.Repeat("[", 20000) + strings.Repeat("]", 20000),
		`{"a":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5001),
		"\x00\x01\x02", "<xml/>", "session_id=s1",
	}
	check := func(r resp) {
		t.Helper()
		if r.status >= 500 && r.status != http.StatusServiceUnavailable && r.status != http.StatusGatewayTimeout && r.status != http.StatusBadGateway {
			t.Fatalf("server error on bad input: %v", r)
		}
		if r.status >= 300 {
			eo := checkEnvelope(t, r)
			if eo["code"] == string(warmpool.CodeInternal) {
				t.Fatalf("INTERNAL on bad input: %v", r)
			}
		}
	}
	// Every route with every id, a plausible body.
	for _, rt := range routes {
		for _, s := range scopes {
			for _, x := range seconds {
				path := rt.path
				if strings.Contains(path, "%[1]s") {
					path = fmt.Sprintf(path, s, x)
				}
				if strings.HasSuffix(path, "/config") && rt.method == http.MethodPut && s == "known" {
					path = strings.Replace(path, "known", "known-put", 1)
				}
				check(e.do(rt.method, path, `{"session_id":"`+x+`"}`))
				check(e.do(http.MethodPatch, path, nil))
				if !strings.Contains(rt.path, "%[1]s") {
					break
				}
			}
			if !strings.Contains(rt.path, "%[1]s") {
				break
			}
		}
	}
	// Every route of known ids with every body, and with garbage headers.
	for _, rt := range routes {
		path := rt.path
		if strings.Contains(path, "%[1]s") {
			scope := "known"
			if rt.method == http.MethodPut {
				scope = "known-put"
			}
			path = fmt.Sprintf(path, scope, "s1")
		}
		for _, b := range bodies {
			check(e.do(rt.method, path, b))
		}
		check(e.do(rt.method, path, `{"session_id":"s1"}`, header{"Idempotency-Key", luaID}))
		check(e.do(rt.method, path, `{"session_id":"s1"}`, header{"Idempotency-Key", strings.Repeat("k", 4000)}))
		check(e.do(rt.method, path, `{"session_id":"s1"}`, header{"Content-Type", "text/plain"}))
	}
	// The known scope survived it all.
	if b := e.route("known", "survivor"); b["new"] != false || b["pod_id"] != survivor["pod_id"] {
		t.Fatalf("a session after the garbage: %v, want %v", b, survivor)
	}
}

// The history comes in pages, newest first: 120 versions in pages of 50 are 50, 50
// and 20, each page but the last with the next_before that fetches the next; no limit
// is a page of 50.
func TestConfigHistory(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/h/config/history", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	e.wantErr(e.do(http.MethodGet, "/v1/scopes/h/config/history?before=10", nil), http.StatusNotFound, warmpool.CodeScopeNotFound)
	const n = 120
	for i := 1; i <= n; i++ {
		e.putScope("h", scopeCfg(i, 1, 0, 1))
	}
	// page checks a page: the versions from newest down, each the config PUT as that
	// version, and its next_before (0: none).
	page := func(path string, newest, count, next int) {
		t.Helper()
		got := e.ok(http.MethodGet, path, nil)
		versions := got["versions"].([]any)
		if got["scope_id"] != "h" || len(versions) != count {
			t.Fatalf("%s: %d versions, want %d", path, len(versions), count)
		}
		for i, v := range versions {
			v := v.(map[string]any)
			pool := v["config"].(map[string]any)["pool"].(map[string]any)
			if want := newest - i; num(t, v, "version") != want || num(t, pool, "max_concurrency") != want {
				t.Fatalf("%s: versions[%d] is %v, want version %d", path, i, v, want)
			}
		}
		if _, has := got["next_before"]; has != (next != 0) || (next != 0 && num(t, got, "next_before") != next) {
			t.Fatalf("%s: next_before %v, want %d (0: none)", path, got["next_before"], next)
		}
	}
	page("/v1/scopes/h/config/history?limit=50", 120, 50, 71)
	page("/v1/scopes/h/config/history?limit=50&before=71", 70, 50, 21)
	page("/v1/scopes/h/config/history?before=21&limit=50", 20, 20, 0)
	page("/v1/scopes/h/config/history", 120, warmpool.DefaultHistoryLimit, 71)
	page("/v1/scopes/h/config/history?limit=500", 120, n, 0)
	page("/v1/scopes/h/config/history?before=1", 0, 0, 0)
}

// A bad limit or before is 400 VALIDATION naming the parameter, before the scope is
// looked up.
func TestConfigHistoryBadPage(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("h", scopeCfg(4, 1, 0, 1))
	for _, q := range []string{"limit=0", "limit=501", "limit=-1", "limit=ten", "limit=", "limit=1.5", "limit=1&limit=2",
		"limit=99999999999999999999"} {
		for _, scope := range []string{"h", "nosuch"} {
			e.wantErr(e.do(http.MethodGet, "/v1/scopes/"+scope+"/config/history?"+q, nil), http.StatusBadRequest, warmpool.CodeValidation, "limit: ")
		}
	}
	for _, q := range []string{"before=0", "before=-3", "before=v2", "before=", "before=2&before=3", "before=99999999999999999999", "limit=5&before=x"} {
		e.wantErr(e.do(http.MethodGet, "/v1/scopes/h/config/history?"+q, nil), http.StatusBadRequest, warmpool.CodeValidation, "before: ")
	}
}

// A config with several faults is refused with all of them, each by its full path.
func TestConfigValidationEveryFault(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	r := e.do(http.MethodPut, "/v1/scopes/v/config", `{"deploy":{"imagee":"x"},"pool":{"queue_size":-1,"pod_concurrency":"2"}}`)
	e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, "deploy.imagee: unknown field", "pool.pod_concurrency: expected int", "pool.queue_size: must be")
}

// The pool page is open; its data is an admin call that shows every scope's pool.
func TestPoolPage(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, func(c *server.Config) { c.AuthToken, c.AdminToken = "gw", "adm" })
	page := e.do(http.MethodGet, "/ui", nil, header{"Authorization", ""})
	if page.status != http.StatusOK || !strings.HasPrefix(page.header.Get("Content-Type"), "text/html") ||
		!strings.Contains(page.header.Get("Content-Security-Policy"), "default-src 'none'") || !strings.Contains(string(page.raw), testInstance) {
		t.Fatalf("GET /ui: %d %v", page.status, page.header)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/ui/state", nil, header{"Authorization", ""}), http.StatusUnauthorized, warmpool.CodeUnauthorized)
	e.wantErr(e.do(http.MethodGet, "/v1/ui/state", nil, header{"Authorization", "Bearer gw"}), http.StatusForbidden, warmpool.CodeForbidden)

	admin := header{"Authorization", "Bearer adm"}
	e.ok(http.MethodPut, "/v1/scopes/u/config", scopeCfg(4, 2, 1, 10), admin)
	e.ok(http.MethodPost, "/v1/scopes/u/sessions", `{"session_id":"s1"}`, admin)
	st := e.ok(http.MethodGet, "/v1/ui/state?detail=u,nosuch", nil, admin)
	keys(t, st, "instance_id", "now", "summary_at", "summary_by", "totals", "filter", "sort", "offset", "limit", "matched", "rows", "tenants", "more_tenants", "scopes")
	scopes, rows := st["scopes"].([]any), st["rows"].([]any)
	if len(scopes) != 1 || len(rows) != 1 || rows[0].(map[string]any)["scope_id"] != "u" {
		t.Fatalf("state: %v", st)
	}
	e.wantErr(e.do(http.MethodGet, "/v1/ui/state?limit=0", nil, admin), http.StatusBadRequest, warmpool.CodeValidation, "limit: ")
	u := scopes[0].(map[string]any)
	pods, deploys := u["pods"].([]any), u["deploys"].([]any)
	if u["scope_id"] != "u" || num(t, u, "max_pods") != 2 || len(pods) != 1 || len(deploys) != 1 {
		t.Fatalf("scope u: %v", u)
	}
	if p := pods[0].(map[string]any); p["state"] != "busy" || num(t, p, "sessions") != 1 || p["current"] != true {
		t.Fatalf("pod: %v", p)
	}
	if d := deploys[0].(map[string]any); d["result"] != "ok" {
		t.Fatalf("deploy: %v", d)
	}

	// A deploy in flight with its follower, then a route in the queue: the page counts
	// them.
	e.token = "adm"
	counts := func(when string, placeholders, followers, waiters int) {
		t.Helper()
		u := e.ok(http.MethodGet, "/v1/ui/state?detail=u", nil)["scopes"].([]any)[0].(map[string]any)
		if num(t, u, "placeholders") != placeholders || num(t, u, "followers") != followers || num(t, u, "waiters") != waiters {
			t.Fatalf("%s: scope u %v, want %d placeholders, %d followers, %d waiters", when, u, placeholders, followers, waiters)
		}
	}
	e.route("u", "s2")
	release := e.fake.Hold()
	var wg sync.WaitGroup
	routeAsync := func(session string) {
		wg.Go(func() { e.route("u", session) })
	}
	routeAsync("s3")
	await.True(t, 5*time.Second, "the second deploy starts", func() bool { return e.fake.InFlight() == 1 })
	routeAsync("s4")
	await.True(t, 5*time.Second, "s4 follows the deploy", func() bool { return num(t, e.pool("u"), "followers") == 1 })
	counts("a deploy in flight", 1, 1, 0)
	release()
	wg.Wait()
	routeAsync("s5")
	await.True(t, 5*time.Second, "s5 queues", func() bool { return num(t, e.pool("u"), "waiters") == 1 })
	counts("a route queued", 0, 0, 1)
	e.ok(http.MethodDelete, "/v1/scopes/u/sessions/s1", nil)
	wg.Wait()
}
