package server_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warmpool/warmpool"
	"github.com/warmpool/warmpool/driver/fake"
	"github.com/warmpool/warmpool/server"
)

func withTokens(gateway, admin string) envOption {
	return func(c *server.Config) { c.AuthToken, c.AdminToken = gateway, admin }
}

func withTokenFiles(gateway, admin string) envOption {
	return func(c *server.Config) { c.AuthTokenFile, c.AdminTokenFile = gateway, admin }
}

func bearer(token string) header { return header{"Authorization", "Bearer " + token} }

// noAuth is a request without credentials (the env adds none either).
var noAuth = header{"Authorization", ""}

// apiCall is one /v1 call of the token matrix.
type apiCall struct{ method, path, body string }

// gatewayCalls are the calls a gateway token may make; adminCalls need the admin token.
var (
	gatewayCalls = []apiCall{
		{http.MethodGet, "/v1/scopes", ""},
		{http.MethodPost, "/v1/scopes/ok/sessions", `{"session_id":"g1"}`},
		{http.MethodGet, "/v1/scopes/ok/sessions/g1", ""},
		{http.MethodPost, "/v1/scopes/ok/sessions/g1/touch", ""},
		{http.MethodDelete, "/v1/scopes/ok/sessions/g1", ""},
		{http.MethodPost, "/v1/scopes/ok/pods/acquire", `{}`},
		{http.MethodGet, "/v1/scopes/ok/pool", ""},
	}
	adminCalls = []apiCall{
		{http.MethodPut, "/v1/scopes/ok/config", scopeCfg(4, 2, 0, 1)},
		{http.MethodPost, "/v1/config/sync", ""},
		{http.MethodGet, "/v1/scopes/ok/config", ""},
		{http.MethodGet, "/v1/scopes/ok/config/history", ""},
	}
)

// allowed reports whether the auth layer let the call through: anything but 401/403.
func allowed(r resp) bool {
	return r.status != http.StatusUnauthorized && r.status != http.StatusForbidden
}

// The two tokens of SPEC §10: the gateway token on an admin call gets 403 FORBIDDEN,
// the admin token works everywhere, no or a wrong token gets 401 with
// WWW-Authenticate: Bearer; the operations endpoints stay open.
func TestTwoTokens(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withTokens("gw-token", "admin-token"))
	e.ok(http.MethodPut, "/v1/scopes/ok/config", scopeCfg(4, 2, 0, 1), bearer("admin-token"))

	for _, c := range gatewayCalls {
		for _, tok := range []string{"gw-token", "admin-token"} {
			if r := e.do(c.method, c.path, c.body, bearer(tok)); !allowed(r) {
				t.Fatalf("%s on a gateway call: %v", tok, r)
			}
		}
	}
	for _, c := range adminCalls {
		r := e.do(c.method, c.path, c.body, bearer("gw-token"))
		e.wantErr(r, http.StatusForbidden, warmpool.CodeForbidden, "admin token")
		e.ok(c.method, c.path, c.body, bearer("admin-token"))
	}
	for _, c := range append(gatewayCalls, adminCalls...) {
		for _, h := range []header{noAuth, bearer("wrong"), bearer("gw-tokenx"), {"Authorization", "Bearergw-token"}, {"Authorization", "Basic Z3ctdG9rZW4="}} {
			r := e.do(c.method, c.path, c.body, h)
			e.wantErr(r, http.StatusUnauthorized, warmpool.CodeUnauthorized)
			if got := r.header.Get("WWW-Authenticate"); got != "Bearer" {
				t.Fatalf("%v: WWW-Authenticate %q", r, got)
			}
		}
	}
	// Only the two admin puts were stored; the refused ones stored nothing.
	if v := num(t, e.ok(http.MethodGet, "/v1/scopes/ok/config", nil, bearer("admin-token")), "version"); v != 2 {
		t.Fatalf("config version %d, want 2", v)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if r := e.do(http.MethodGet, p, nil, noAuth); r.status != http.StatusOK {
			t.Fatalf("without a token: %v", r)
		}
	}
}

// Config reads are admin calls (SPEC §11.5): a scope's env values (an API key) reach
// only the admin token. The gateway token gets 403 on the config and on its history,
// no token 401, and no answer the gateway token or no token gets carries the value:
// not the scope list, the pool, a route, its binding or an acquire, not the pool
// page's data (403), /metrics, or the answers that refuse it.
func TestConfigReadsAreAdmin(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withTokens("gw-token", "admin-token"))
	const secret = "sk-live-0123456789abcdef"
	e.ok(http.MethodPut, "/v1/scopes/sec/config", `{"deploy":{"ready_timeout_s":10,"env":{"OPENAI_API_KEY":"`+secret+`"}},`+
		`"pool":{"max_concurrency":4,"pod_concurrency":2}}`, bearer("admin-token"))
	leaks := func(r resp) {
		t.Helper()
		if strings.Contains(string(r.raw), secret) || strings.Contains(fmt.Sprint(r.header), secret) {
			t.Fatalf("the env value reached a caller without the admin token: %v", r)
		}
	}
	for _, path := range []string{"/v1/scopes/sec/config", "/v1/scopes/sec/config/history", "/v1/scopes/sec/config/history?limit=1&before=2",
		"/v1/scopes/sec/config/history?limit=bad", "/v1/scopes/nosuch/config"} {
		r := e.do(http.MethodGet, path, nil, bearer("gw-token"))
		e.wantErr(r, http.StatusForbidden, warmpool.CodeForbidden, "admin token")
		leaks(r)
		r = e.do(http.MethodGet, path, nil, noAuth)
		e.wantErr(r, http.StatusUnauthorized, warmpool.CodeUnauthorized)
		leaks(r)
	}
	for _, path := range []string{"/v1/scopes/sec/config", "/v1/scopes/sec/config/history"} {
		if r := e.do(http.MethodGet, path, nil, bearer("admin-token")); r.status != http.StatusOK || !strings.Contains(string(r.raw), secret) {
			t.Fatalf("the admin token does not read the config: %v", r)
		}
	}

	for _, c := range []apiCall{
		{http.MethodGet, "/v1/scopes", ""},
		{http.MethodPost, "/v1/scopes/sec/sessions", `{"session_id":"s1"}`},
		{http.MethodGet, "/v1/scopes/sec/sessions/s1", ""},
		{http.MethodPost, "/v1/scopes/sec/pods/acquire", `{"request_id":"r1"}`},
		{http.MethodGet, "/v1/scopes/sec/pool", ""},
		{http.MethodGet, "/v1/ui/state", ""},
	} {
		r := e.do(c.method, c.path, c.body, bearer("gw-token"))
		if c.path == "/v1/ui/state" {
			e.wantErr(r, http.StatusForbidden, warmpool.CodeForbidden)
		} else if r.status != http.StatusOK {
			t.Fatalf("gateway call: %v", r)
		}
		leaks(r)
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz"} {
		leaks(e.do(http.MethodGet, p, nil, noAuth))
	}
}

// With one of the tokens only: an admin token alone leaves the gateway calls open and
// guards the admin ones; a gateway token alone does everything.
func TestOneToken(t *testing.T) {
	t.Parallel()
	admin := mustEnv(t, withTokens("", "admin-token"))
	admin.ok(http.MethodPut, "/v1/scopes/ok/config", scopeCfg(4, 2, 0, 1), bearer("admin-token"))
	for _, c := range gatewayCalls {
		if r := admin.do(c.method, c.path, c.body, noAuth); !allowed(r) {
			t.Fatalf("admin token only, no token on a gateway call: %v", r)
		}
	}
	for _, c := range adminCalls {
		admin.wantErr(admin.do(c.method, c.path, c.body, noAuth), http.StatusUnauthorized, warmpool.CodeUnauthorized)
		admin.wantErr(admin.do(c.method, c.path, c.body, bearer("other")), http.StatusUnauthorized, warmpool.CodeUnauthorized)
		admin.ok(c.method, c.path, c.body, bearer("admin-token"))
	}

	gw := mustEnv(t, withTokens("gw-token", ""))
	for _, c := range append(adminCalls, gatewayCalls...) {
		if r := gw.do(c.method, c.path, c.body, bearer("gw-token")); !allowed(r) {
			t.Fatalf("gateway token only: %v", r)
		}
		gw.wantErr(gw.do(c.method, c.path, c.body, noAuth), http.StatusUnauthorized, warmpool.CodeUnauthorized)
	}
}

// Token files rotate without a restart: after a rewrite (in place or by rename, as a
// Kubernetes Secret volume does) the old token is refused and the new one accepted on
// the very next call; an unreadable file refuses its token, never opens the API.
func TestTokenFileRotation(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gwFile, adminFile := filepath.Join(dir, "gateway"), filepath.Join(dir, "admin")
	write := func(path, token string) {
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(gwFile, "gw-1")
	write(adminFile, "admin-1")
	e := mustEnv(t, withTokenFiles(gwFile, adminFile))
	route := apiCall{http.MethodGet, "/v1/scopes", ""}
	put := adminCalls[0]
	status := func(c apiCall, tok string) int { return e.do(c.method, c.path, c.body, bearer(tok)).status }
	want := func(c apiCall, tok string, st int) {
		t.Helper()
		if got := status(c, tok); got != st {
			t.Fatalf("%s %s with %q: %d, want %d", c.method, c.path, tok, got, st)
		}
	}
	want(route, "gw-1", 200)
	want(put, "admin-1", 200)
	want(put, "gw-1", 403)

	// In place.
	if err := os.WriteFile(gwFile, []byte("gw-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	want(route, "gw-1", 401)
	want(route, "gw-2", 200)

	// By rename, the same length: a new file.
	write(adminFile, "admin-2")
	want(put, "admin-1", 401)
	want(put, "admin-2", 200)
	want(route, "admin-2", 200)
	want(put, "gw-2", 403)

	// A missing or empty gateway file refuses the gateway token only.
	if err := os.Remove(gwFile); err != nil {
		t.Fatal(err)
	}
	want(route, "gw-2", 401)
	want(route, "", 401)
	want(route, "admin-2", 200)
	write(gwFile, "  ")
	want(route, "gw-2", 401)
	write(gwFile, "gw-3")
	want(route, "gw-3", 200)
	want(route, "gw-2", 401)
}

// A token given twice, or a token file that holds none, stops the start.
func TestTokenConfigErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  server.Config
		want string
	}{
		{server.Config{AuthToken: "a", AuthTokenFile: empty}, "--auth-token or --auth-token-file"},
		{server.Config{AdminToken: "a", AdminTokenFile: empty}, "--admin-token or --admin-token-file"},
		{server.Config{AuthTokenFile: empty}, "empty"},
		{server.Config{AdminTokenFile: filepath.Join(dir, "missing")}, "missing"},
	} {
		c.cfg.StorePath, c.cfg.Driver = ":memory:", fake.New()
		srv, err := server.New(context.Background(), c.cfg)
		if err == nil {
			_ = srv.Close()
			t.Fatalf("%+v: started", c.cfg)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: %v, want it to say %q", c.cfg, err, c.want)
		}
	}
}
