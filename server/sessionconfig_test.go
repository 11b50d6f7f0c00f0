package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/warmpool/warmpool"
)

// secretValue is the value of the secret the tests' configs name: it must show up in
// the agent's answer and nowhere else.
const secretValue = "hunter2-not-for-logs"

// agentConfig fetches session's config as the agent of the pod whose token is tok.
func (e *env) agentConfig(tok, session string) resp {
	e.t.Helper()
	h := noAuth
	if tok != "" {
		h = bearer(tok)
	}
	return e.do(http.MethodGet, "/v1/agents/sessions/"+session+"/config", nil, h)
}

// routeWith routes session in scope with a session_config.
func (e *env) routeWith(scope, session string, cfg map[string]any) map[string]any {
	e.t.Helper()
	return e.ok(http.MethodPost, "/v1/scopes/"+scope+"/sessions", map[string]any{"session_id": session, "session_config": cfg})
}

// envOf is the env of a 200 answer of the config route.
func envOf(t *testing.T, r resp) map[string]any {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("config: %v, want 200", r)
	}
	return r.obj(t)["env"].(map[string]any)
}

// A session's config reaches the agent of its pod alone, its secret ref read at the
// fetch: another pod's token finds nothing of it, nor does any token once the session
// ended; an affinity route of the bound session keeps the config it has; a session
// routed without one has an empty env; a hold's config is fetched under the hold id.
// The secret's value is in no pod spec, no log line, no metric and no Redis value.
func TestSessionConfigReachesItsOwnAgentOnly(t *testing.T) {
	t.Parallel()
	var logs logBuffer
	e := mustEnv(t, withReportSecret, withLogs(&logs))
	e.fake.SetSecret("db", "password", secretValue)
	e.putScope("ok", `{"pool":{"max_concurrency":4,"pod_concurrency":1,"recycle":"reuse"}}`)
	cfg := map[string]any{"env": map[string]string{"API_URL": "https://api.example"},
		"secret_refs": map[string]any{"DB_PASSWORD": map[string]string{"secret": "db", "key": "password"}}}
	pod1 := e.routeWith("ok", "s1", cfg)["pod_id"].(string)
	pod2 := e.routeWith("ok", "s2", map[string]any{"env": map[string]string{"WHO": "s2"}})["pod_id"].(string)
	pod3 := e.routedPod("ok", "plain")
	tok1, tok2, tok3 := e.srv.ReportToken("ok", pod1), e.srv.ReportToken("ok", pod2), e.srv.ReportToken("ok", pod3)

	if got := envOf(t, e.agentConfig(tok1, "s1")); len(got) != 2 || got["API_URL"] != "https://api.example" || got["DB_PASSWORD"] != secretValue {
		t.Fatalf("s1's env %v", got)
	}
	if got := envOf(t, e.agentConfig(tok2, "s2")); len(got) != 1 || got["WHO"] != "s2" {
		t.Fatalf("s2's env %v", got)
	}
	if got := envOf(t, e.agentConfig(tok3, "plain")); len(got) != 0 {
		t.Fatalf("plain's env %v, want empty", got)
	}
	e.routeWith("ok", "s1", map[string]any{"env": map[string]string{"API_URL": "changed"}})
	if got := envOf(t, e.agentConfig(tok1, "s1")); got["API_URL"] != "https://api.example" {
		t.Fatalf("s1's env %v after an affinity route with another config, want the first", got)
	}
	e.wantErr(e.agentConfig(tok2, "s1"), http.StatusNotFound, warmpool.CodeSessionNotFound)
	e.wantErr(e.agentConfig(tok1, "s2"), http.StatusNotFound, warmpool.CodeSessionNotFound)
	e.wantErr(e.agentConfig(tok1, "nobody"), http.StatusNotFound, warmpool.CodeSessionNotFound)
	e.wantErr(e.agentConfig(e.srv.ReportToken("other", pod1), "s1"), http.StatusNotFound, warmpool.CodeSessionNotFound)
	for _, tok := range []string{"", e.token, "ok~" + pod1 + "~bad"} {
		e.wantErr(e.agentConfig(tok, "s1"), http.StatusUnauthorized, warmpool.CodeUnauthorized)
	}

	// Ended: the agent of a reused pod finds out from the fetch and from its report.
	e.ok(http.MethodDelete, "/v1/scopes/ok/sessions/s1", nil)
	e.wantErr(e.agentConfig(tok1, "s1"), http.StatusNotFound, warmpool.CodeSessionNotFound)
	ans := e.ok(http.MethodPost, "/v1/agents/report", map[string]any{"pod_id": pod1, "scope_id": "ok", "sessions": []string{"s1"}}, bearer(tok1))
	if u := ans["unknown_sessions"].([]any); len(u) != 1 || u[0] != "s1" {
		t.Fatalf("report answer %v: want s1 unknown", ans)
	}
	// The next session on the reused pod sees none of s1's.
	if pod := e.routedPod("ok", "s4"); pod != pod1 {
		t.Fatalf("s4 went to %s, want the reused %s", pod, pod1)
	}
	if got := envOf(t, e.agentConfig(tok1, "s4")); len(got) != 0 {
		t.Fatalf("s4's env %v on s1's old pod, want empty", got)
	}

	e.ok(http.MethodDelete, "/v1/scopes/ok/sessions/s4", nil)
	h := e.ok(http.MethodPost, "/v1/scopes/ok/pods/acquire", map[string]any{"session_config": map[string]any{"env": map[string]string{"HOLDER": "api"}}})
	hold, hpod := h["hold_id"].(string), h["pod_id"].(string)
	if got := envOf(t, e.agentConfig(e.srv.ReportToken("ok", hpod), hold)); got["HOLDER"] != "api" {
		t.Fatalf("hold's env %v", got)
	}
	e.ok(http.MethodPost, "/v1/scopes/ok/pods/"+hpod+"/release", map[string]string{"hold_id": hold})
	e.wantErr(e.agentConfig(e.srv.ReportToken("ok", hpod), hold), http.StatusNotFound, warmpool.CodeSessionNotFound)

	for _, d := range e.fake.Deploys() {
		for k, v := range d.Env {
			if strings.Contains(v, secretValue) || k == "DB_PASSWORD" || k == "API_URL" {
				t.Fatalf("deploy env %s=%q: a session's config is never in the pod spec", k, v)
			}
		}
	}
	if strings.Contains(logs.String(), secretValue) {
		t.Fatal("the secret's value is in the logs")
	}
	if strings.Contains(string(e.do(http.MethodGet, "/metrics", nil).raw), secretValue) {
		t.Fatal("the secret's value is in /metrics")
	}
	e.wantNoRedisValue("https://api.example")
}

// wantNoRedisValue fails when any value under the env's prefix (strings and hashes)
// holds s: session configs are kept only sealed.
func (e *env) wantNoRedisValue(s string) {
	e.t.Helper()
	ctx := context.Background()
	n := 0
	err := e.r.ForEachServer(ctx, func(ctx context.Context, c *redis.Client) error {
		iter := c.Scan(ctx, 0, e.r.Prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			var vals []string
			switch c.Type(ctx, key).Val() {
			case "string":
				vals = []string{c.Get(ctx, key).Val()}
			case "hash":
				for f, v := range c.HGetAll(ctx, key).Val() {
					vals = append(vals, f, v)
				}
			}
			for _, v := range vals {
				if strings.Contains(v, s) {
					e.t.Errorf("Redis key %s holds %q in the clear", key, s)
				}
			}
			n++
		}
		return iter.Err()
	})
	if err != nil || n == 0 {
		e.t.Fatalf("scan of the keys: %d keys, %v", n, err)
	}
}

// A bad session_config is 400 VALIDATION naming the field, on the route and the
// acquire alike; without a report secret none is taken (no agent could fetch it).
func TestSessionConfigValidation(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withReportSecret)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	many := map[string]string{}
	for i := range warmpool.MaxSessionConfigEntries + 1 {
		many["V"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+strings.Repeat("_", i/26)] = "1"
	}
	ref := func(secret, key string) map[string]any {
		return map[string]any{"secret_refs": map[string]any{"S": map[string]string{"secret": secret, "key": key}}}
	}
	for _, c := range []struct {
		cfg   any
		field string
	}{
		{map[string]any{"env": map[string]string{"1X": "v"}}, `session_config.env."1X"`},
		{map[string]any{"env": map[string]string{"A-B": "v"}}, `session_config.env."A-B"`},
		{map[string]any{"env": many}, "session_config: 257 entries"},
		{map[string]any{"env": map[string]string{"BIG": strings.Repeat("x", warmpool.MaxSessionConfigBytes)}}, "session_config: "},
		{ref("Not_A_Name", "k"), "session_config.secret_refs.S.secret"},
		{ref("db", "a/b"), "session_config.secret_refs.S.key"},
		{map[string]any{"env": map[string]string{"S": "v"}, "secret_refs": map[string]any{"S": map[string]string{"secret": "db", "key": "k"}}}, "session_config.secret_refs.S"},
		{map[string]any{"envs": map[string]string{}}, "envs"},
	} {
		r := e.do(http.MethodPost, "/v1/scopes/ok/sessions", map[string]any{"session_id": "v1", "session_config": c.cfg})
		e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, c.field)
		r = e.do(http.MethodPost, "/v1/scopes/ok/pods/acquire", map[string]any{"session_config": c.cfg})
		e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, c.field)
	}
	if len(e.fake.Deploys()) != 0 {
		t.Fatalf("%d deploys for refused routes, want none", len(e.fake.Deploys()))
	}
	// A secret ref the driver does not find is the fetch's 400, naming it.
	pod := e.routeWith("ok", "s1", ref("missing", "k"))["pod_id"].(string)
	e.wantErr(e.agentConfig(e.srv.ReportToken("ok", pod), "s1"), http.StatusBadRequest, warmpool.CodeValidation, "secret_refs.S", "missing")

	off := mustEnv(t)
	off.putScope("ok", scopeCfg(4, 2, 0, 1))
	r := off.do(http.MethodPost, "/v1/scopes/ok/sessions", map[string]any{"session_id": "v1", "session_config": map[string]any{"env": map[string]string{"A": "1"}}})
	off.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, "session_config", "report")
	off.route("ok", "plain") // none, or an empty one, is a plain route
	off.ok(http.MethodPost, "/v1/scopes/ok/sessions", map[string]any{"session_id": "empty", "session_config": map[string]any{}})
}
