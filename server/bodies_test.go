package server_test

import (
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
)

// nestedAllocLimit bounds what a replica may allocate (the test client included) to
// refuse one of the nested bodies of TestNestedBodies: reading the body (a few hundred
// KB, grown by doubling) and the answer, 0.6-1.7 MB. Before the depth bound, the route
// body under session_id cost about 1.5 GB and the config body 370 MB.
const nestedAllocLimit = 4 << 20

// TestNestedBodies sends the bodies of issue 20 over HTTP: thousands of nested objects
// (30-character keys on the route, "deploy" on the config put). Each is a 400 VALIDATION
// that names the nesting (SPEC §11.5) or the first key that is no field, refused for a
// few MB of allocations in all: the decoder's memory is linear in the body, not in its
// depth squared. Not parallel: the bytes allocated are the process's, so no other test
// may run meanwhile.
func TestNestedBodies(t *testing.T) {
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	nest := func(open, close string, depth int) string {
		return strings.Repeat(open, depth) + "1" + strings.Repeat(close, depth)
	}
	key := strings.Repeat("k", 30)
	deep := "nested deeper than 32 levels"
	for _, c := range []struct{ name, method, path, body, msg string }{
		// The first key is no field of a route: refused there, before the nesting.
		{"route", http.MethodPost, "/v1/scopes/ok/sessions", nest(`{"`+key+`":`, "}", 9990), key + ": unknown field"},
		{"route under a field", http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":` + nest(`{"`+key+`":`, "}", 9990) + `}`, deep},
		{"config", http.MethodPut, "/v1/scopes/ok/config", nest(`{"deploy":`, "}", 9999), deep},
		{"acquire", http.MethodPost, "/v1/scopes/ok/pods/acquire", nest(`{"request_id":[`, "]}", 4999), deep},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := *e
			e.t = t
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			r := e.do(c.method, c.path, c.body)
			runtime.ReadMemStats(&after)
			if got := after.TotalAlloc - before.TotalAlloc; got > nestedAllocLimit {
				t.Errorf("%d bytes of nesting cost %.1f MB of allocations, want at most %d MB", len(c.body),
					float64(got)/(1<<20), nestedAllocLimit>>20)
			}
			e.wantErr(r, http.StatusBadRequest, warmpool.CodeValidation, c.msg)
		})
	}
	if v := num(t, e.ok(http.MethodGet, "/v1/scopes/ok/config", nil), "version"); v != 1 {
		t.Fatalf("config version %d after the refused put, want 1", v)
	}
}

// TestFieldNamesMatchExactly: a field name that differs only in case is refused (SPEC
// §11.5), on every strictly decoded body and in the config's nested objects alike.
// encoding/json alone binds SESSION_ID to session_id, so the route below would bind bob
// while a proxy that reads session_id sees alice. Map keys (env names) are data: two
// that differ in case are two variables.
func TestFieldNamesMatchExactly(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	for _, c := range []struct{ method, path, body, key string }{
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"alice","SESSION_ID":"bob"}`, "SESSION_ID"},
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"Session_Id":"bob"}`, "Session_Id"},
		{http.MethodPost, "/v1/scopes/ok/pods/acquire", `{"Request_ID":"r1"}`, "Request_ID"},
		{http.MethodPost, "/v1/scopes/ok/pods/p1/release", `{"HOLD_ID":"h1"}`, "HOLD_ID"},
		{http.MethodPut, "/v1/scopes/ok/config", `{"deploy":{"Image":"agent:2"}}`, "deploy.Image"},
		{http.MethodPut, "/v1/scopes/ok/config", `{"Pool":{"max_concurrency":2}}`, "Pool"},
		{http.MethodPut, "/v1/scopes/ok/config", `{"pool":{"Max_Concurrency":2}}`, "pool.Max_Concurrency"},
	} {
		e.wantErr(e.do(c.method, c.path, c.body), http.StatusBadRequest, warmpool.CodeValidation, c.key+": unknown field")
	}
	for _, s := range []string{"alice", "bob"} {
		e.wantErr(e.do(http.MethodGet, "/v1/scopes/ok/sessions/"+s, nil), http.StatusNotFound, warmpool.CodeSessionNotFound)
	}
	e.putScope("ok", `{"deploy":{"env":{"A":"1","a":"2"}}}`)
	env := e.ok(http.MethodGet, "/v1/scopes/ok/config", nil)["config"].(map[string]any)["deploy"].(map[string]any)["env"].(map[string]any)
	if len(env) != 2 || env["A"] != "1" || env["a"] != "2" {
		t.Fatalf("env %v, want A=1 and a=2", env)
	}
}

// TestBodylessCallsRefuseBodies: the POST and DELETE calls that take no body (a
// session's touch and end, sync, a scope's deletion) accept none or {} only; a list,
// trailing data, a field or a long body is a 400 VALIDATION that changes nothing. They
// were answered 200, the body ignored.
func TestBodylessCallsRefuseBodies(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	e.putScope("ok", scopeCfg(4, 2, 0, 1))
	e.route("ok", "s1")
	calls := []struct{ method, path string }{
		{http.MethodPost, "/v1/scopes/ok/sessions/s1/touch"},
		{http.MethodPost, "/v1/config/sync"},
		{http.MethodDelete, "/v1/scopes/ok/sessions/s1"},
		{http.MethodDelete, "/v1/scopes/ok"},
	}
	for _, c := range calls {
		for _, b := range []struct{ body, msg string }{
			{`[1,2]`, "expected a JSON object"},
			{`{} garbage`, "trailing data"},
			{`{"session_id":"s1"}`, "session_id: unknown field"},
			{`{}` + strings.Repeat(" ", 1<<20-2), "takes no body"},
			{strings.Repeat("x", 1<<20), "takes no body"},
		} {
			e.wantErr(e.do(c.method, c.path, b.body), http.StatusBadRequest, warmpool.CodeValidation, b.msg)
		}
	}
	if got := e.ok(http.MethodGet, "/v1/scopes/ok/sessions/s1", nil); got["pod_id"] == nil {
		t.Fatalf("s1 after the refused calls: %v", got)
	}
	for i, c := range calls {
		body := []string{"", "{}", " { }\n", ""}[i]
		e.ok(c.method, c.path, body)
	}
}
