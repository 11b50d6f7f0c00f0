package server_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

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
	call := func(method, path, body, key string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		if res.Header.Get("X-Request-Id") == "" {
			t.Errorf("%s %s: no X-Request-Id", method, path)
		}
		return res.StatusCode, string(raw)
	}
	if st, body := call(http.MethodPost, "/v2/sandboxes", `{"templateID":"tpl","timeout":30}`, "gw"); st != http.StatusCreated || !strings.Contains(body, `"sandboxID"`) {
		t.Fatalf("create: %d %s", st, body)
	}
	if st, body := call(http.MethodGet, "/v2/sandboxes", "", ""); st != http.StatusUnauthorized || !strings.Contains(body, `"code":401`) {
		t.Fatalf("list without a key: %d %s", st, body)
	}
	if st, body := call(http.MethodGet, "/v1/scopes", "", "gw"); st != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Fatalf("/v1 on the E2B listener: %d %s, want E2B's 404", st, body)
	}
	if res, body, err := send(http.MethodGet, r.base+"/v2/sandboxes", ""); err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("the front door on the main listener: %v %s %v, want 404", res, body, err)
	}
	r.stop()
	select {
	case err := <-r.done:
		r.done <- err
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("the E2B listener is still open after Run returned")
	}
	if off := mustEnv(t); off.srv.E2BAddr() != "" || off.srv.E2BHandler() != nil {
		t.Fatal("a front door without --e2b-listen")
	}
}
