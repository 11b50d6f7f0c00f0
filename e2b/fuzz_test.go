package e2b_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// FuzzFrontDoor sends random bodies to create, set-timeout and connect and random
// queries to the list: whatever they are, the answer is never a 500, and an error is
// always E2B's body with its status. `go test` runs the seeds; `go test -fuzz
// FuzzFrontDoor ./e2b/` explores.
func FuzzFrontDoor(f *testing.F) {
	for _, s := range []string{
		``, `{`, `[]`, `null`, `42`, `{}`, `{"templateID":"tpl"}`, `{"templateID":"tpl","timeout":1e400}`,
		`{"templateID":"tpl","timeout":-1}`, `{"templateID":"tpl","metadata":{"a":1}}`, `{"templateID":"tpl","envVars":null}`,
		`{"templateID":"tpl","network":[]}`, `{"templateID":"tpl","autoResume":{"enabled":"yes"}}`, `{"timeout":5}`,
		`{"templateID":"a'..redis.call('FLUSHALL')..'"}`, "{\"templateID\":\"\xff\"}", strings.Repeat("[", 1000),
	} {
		f.Add([]byte(s), "limit=2&order=asc&nextToken=MTIzLmFiYw")
	}
	f.Add([]byte(`{}`), "metadata=a%3D%25&state=running,,paused&startedAfter=2026-01-02T03:04:05Z")
	d := newDoor(f)
	id := d.create(`{"templateID":"tpl","timeout":3600}`).SandboxID
	f.Fuzz(func(t *testing.T, body []byte, query string) {
		if strings.ContainsFunc(query, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == '#' }) {
			return // not a request target: net/http refuses the request line itself
		}
		for _, tg := range []struct{ method, path string }{
			{http.MethodPost, "/v2/sandboxes"},
			{http.MethodPost, "/sandboxes/" + id + "/timeout"},
			{http.MethodPost, "/v2/sandboxes/" + id + "/connect"},
			{http.MethodGet, "/v2/sandboxes?" + query},
			{http.MethodGet, "/sandboxes?" + query},
		} {
			a := send(t, d.e2b.URL, tg.method, tg.path, string(body), gatewayKey)
			if a.status == http.StatusCreated { // room for the next: the scope holds four
				var sb sandbox
				a.into(t, &sb)
				send(t, d.e2b.URL, http.MethodDelete, "/sandboxes/"+sb.SandboxID, "", gatewayKey)
			}
			if a.status >= 500 {
				t.Fatalf("%s %s %q: %d %s", tg.method, tg.path, body, a.status, a)
			}
			if a.status >= 400 {
				var e e2bError
				if json.Unmarshal(a.raw, &e) != nil || e.Code != a.status || e.Message == "" {
					t.Fatalf("%s %s %q: %d %s, not E2B's error body", tg.method, tg.path, body, a.status, a)
				}
			}
		}
	})
}
