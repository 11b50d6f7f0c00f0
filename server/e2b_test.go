package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/warmpool/warmpool/server"
)

// TestE2BListen serves the E2B front door on a listener of its own (SPEC §12.3) while
// the replica runs: E2B's routes there, X-API-Key checked as the gateway token, none of
// /v1 (nor the front door on the main listener); it closes when the replica shuts
// down. Without --e2b-listen there is none.
func TestE2BListen(t *testing.T) {
	t.Parallel()
	e := mustEnv(t, withToken("gw"), func(c *server.Config) { c.E2BListen = "127.0.0.1:0" })
	e.putScope("tpl", scopeCfg(2, 1, 0, 1))
	r := e.run(t)
	addr := e.srv.E2BAddr()
	if addr == "" || addr == r.addr {
		t.Fatalf("E2B address %q (main %s): want a listener of its own", addr, r.addr)
	}
	base := "http://" + addr
	if st, body := request(t, http.MethodPost, base+"/v2/sandboxes", `{"templateID":"tpl","timeout":30}`, "X-API-Key", "gw"); st != http.StatusCreated || !strings.Contains(body, `"sandboxID"`) {
		t.Fatalf("create: %d %s", st, body)
	}
	if st, body := request(t, http.MethodGet, base+"/v2/sandboxes", ""); st != http.StatusUnauthorized || !strings.Contains(body, `"code":401`) {
		t.Fatalf("list without a key: %d %s", st, body)
	}
	if st, body := request(t, http.MethodGet, base+"/v1/scopes", "", "Authorization", "Bearer gw"); st != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Fatalf("/v1 on the E2B listener: %d %s, want E2B's 404", st, body)
	}
	if st, body := request(t, http.MethodGet, r.base+"/v2/sandboxes", "", "X-API-Key", "gw"); st != http.StatusNotFound {
		t.Fatalf("the front door on the main listener: %d %s, want 404", st, body)
	}
	r.stopped(t, addr)
	if off := mustEnv(t); off.srv.E2BAddr() != "" || off.srv.E2BHandler() != nil {
		t.Fatal("a front door without --e2b-listen")
	}
}
