package server_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/warmpool/warmpool"
)

// A scope names its tenant (SPEC §12.1): the scope itself when its config names none.
// The tenant is stored, answered by GET, published to Redis with the config, changed
// without a redeploy, and a bad one is refused naming the field.
func TestScopeNamesItsTenant(t *testing.T) {
	t.Parallel()
	e := mustEnv(t)
	ctx := context.Background()
	published := func(scope string) string {
		t.Helper()
		v, err := e.r.Client.HGet(ctx, e.srv.Store().Keys().Scope(scope).Config, "tenant").Result()
		if err != nil {
			t.Fatalf("scope %s: the published tenant: %v", scope, err)
		}
		return v
	}
	first := e.putScope("chat", `{"pool":{"max_concurrency":4}}`)
	got := e.ok(http.MethodGet, "/v1/scopes/chat/config", nil)
	if tenant := got["config"].(map[string]any)["tenant"]; tenant != "chat" {
		t.Fatalf("a config naming no tenant is stored with %v, want the scope id", tenant)
	}
	if p := published("chat"); p != "chat" {
		t.Fatalf("published tenant %q, want chat", p)
	}

	second := e.putScope("chat", `{"tenant":"acme","pool":{"max_concurrency":4}}`)
	if second["deploy_ver"] != first["deploy_ver"] {
		t.Fatalf("a new tenant changed the deploy_ver: %v, then %v", first, second)
	}
	got = e.ok(http.MethodGet, "/v1/scopes/chat/config", nil)
	if tenant := got["config"].(map[string]any)["tenant"]; tenant != "acme" || num(t, got, "version") != 2 {
		t.Fatalf("GET answered %v, want tenant acme at version 2", got)
	}
	if p := published("chat"); p != "acme" {
		t.Fatalf("published tenant %q, want acme", p)
	}

	for _, body := range []string{`{"tenant":"Acme"}`, `{"tenant":"a/b"}`, `{"tenant":"-acme"}`, `{"tenant":5}`} {
		e.wantErr(e.do(http.MethodPut, "/v1/scopes/chat/config", body), http.StatusBadRequest, warmpool.CodeValidation, "tenant")
	}
	if v := num(t, e.ok(http.MethodGet, "/v1/scopes/chat/config", nil), "version"); v != 2 {
		t.Fatalf("a refused tenant stored version %d", v)
	}
}
