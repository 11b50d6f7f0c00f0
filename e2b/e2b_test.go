package e2b_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/warmpool/warmpool/e2b"
	"github.com/warmpool/warmpool/server"
)

var sandboxIDs = regexp.MustCompile(`^[a-z0-9]{20}$`)

// A sandbox's life through the front door: created (its session bound with the
// timeout as a fixed expiry), read, its timeout set and extended by connect, killed;
// after that it is E2B's 404 everywhere and its session is gone.
func TestSandboxLifecycle(t *testing.T) {
	d := newDoor(t)
	ctx := context.Background()
	start := d.clock.Now()
	sb := d.create(`{"templateID":"tpl","timeout":60,"metadata":{"user":"ann"},"envVars":{}}`)
	if !sandboxIDs.MatchString(sb.SandboxID) || sb.TemplateID != template || sb.EnvdVersion != e2b.EnvdVersion ||
		sb.ClientID == "" || sb.Domain != nil || sb.TrafficAccessToken != nil {
		t.Fatalf("created %+v", sb)
	}
	id := sb.SandboxID
	det := d.info(id)
	if det.SandboxID != id || det.TemplateID != template || !det.StartedAt.Equal(start) || !det.EndAt.Equal(start.Add(time.Minute)) ||
		det.State != "running" || det.Metadata["user"] != "ann" || det.CPUCount != 1 || det.MemoryMB != 512 ||
		det.EnvdVersion != e2b.EnvdVersion || det.Lifecycle == nil || det.Lifecycle.OnTimeout != "kill" {
		t.Fatalf("get: %+v", det)
	}
	if err := d.session(id); err != nil {
		t.Fatalf("the sandbox's session: %v", err)
	}

	// Activity does not move the end: E2B's timeout is not idleness.
	d.clock.Advance(20 * time.Second)
	if ok, err := d.srv.SM.Touch(ctx, template, id); !ok || err != nil {
		t.Fatalf("touch: %v %v", ok, err)
	}
	if _, err := d.srv.SM.Route(ctx, template, id, ""); err != nil {
		t.Fatal(err)
	}
	if got := d.info(id).EndAt; !got.Equal(start.Add(time.Minute)) {
		t.Fatalf("end after a touch and a route: %v, want %v", got, start.Add(time.Minute))
	}

	// set_timeout sets the end from now, sooner or later; connect only moves it later.
	if a := d.call(http.MethodPost, "/sandboxes/"+id+"/timeout", `{"timeout":10}`, gatewayKey); a.status != http.StatusNoContent {
		t.Fatalf("set timeout: %d %s", a.status, a)
	}
	now := d.clock.Now()
	if got := d.info(id).EndAt; !got.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("end after set timeout 10: %v, want %v", got, now.Add(10*time.Second))
	}
	var conn sandbox
	a := d.call(http.MethodPost, "/v2/sandboxes/"+id+"/connect", `{"timeout":5}`, gatewayKey)
	if a.status != http.StatusOK {
		t.Fatalf("connect: %d %s", a.status, a)
	}
	if a.into(t, &conn); conn.SandboxID != id || conn.TemplateID != template {
		t.Fatalf("connect: %+v", conn)
	}
	if got := d.info(id).EndAt; !got.Equal(now.Add(10 * time.Second)) {
		t.Fatalf("end after connect 5: %v, want it kept at %v", got, now.Add(10*time.Second))
	}
	if a := d.call(http.MethodPost, "/sandboxes/"+id+"/connect", `{"timeout":100}`, gatewayKey); a.status != http.StatusOK {
		t.Fatalf("connect (v1): %d %s", a.status, a)
	}
	if got := d.info(id).EndAt; !got.Equal(now.Add(100 * time.Second)) {
		t.Fatalf("end after connect 100: %v, want %v", got, now.Add(100*time.Second))
	}
	if a := d.call(http.MethodPost, "/v2/sandboxes/"+id+"/connect", "", gatewayKey); a.status != http.StatusOK {
		t.Fatalf("connect without a body: %d %s", a.status, a)
	}
	if got := d.info(id).EndAt; !got.Equal(now.Add(e2b.DefaultTimeout)) {
		t.Fatalf("end after connect without a timeout: %v, want the default %v from now", got, e2b.DefaultTimeout)
	}

	if a := d.call(http.MethodDelete, "/sandboxes/"+id, "", gatewayKey); a.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", a.status, a)
	}
	d.sessionGone(id)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/sandboxes/" + id, ""},
		{http.MethodDelete, "/sandboxes/" + id, ""},
		{http.MethodPost, "/sandboxes/" + id + "/timeout", `{"timeout":10}`},
		{http.MethodPost, "/v2/sandboxes/" + id + "/connect", `{"timeout":10}`},
	} {
		refused(t, c.method+" "+c.path+" after the kill", d.call(c.method, c.path, c.body, gatewayKey), http.StatusNotFound, id)
	}
}

// A sandbox ends at its timeout, busy or not: then it reads as gone, its record is
// dropped, and the sweep frees its slot.
func TestTimeoutEndsTheSandbox(t *testing.T) {
	d := newDoor(t)
	ctx := context.Background()
	v1 := d.call(http.MethodPost, "/sandboxes", `{"templateID":"tpl"}`, gatewayKey)
	if v1.status != http.StatusCreated {
		t.Fatalf("create (v1): %d %s", v1.status, v1)
	}
	var old sandbox
	v1.into(t, &old)
	if got := d.info(old.SandboxID).EndAt; !got.Equal(d.clock.Now().Add(e2b.DefaultTimeoutV1)) {
		t.Fatalf("v1 default timeout: end %v, want now + %v", got, e2b.DefaultTimeoutV1)
	}
	sb := d.create(`{"templateID":"tpl","timeout":10}`)
	d.clock.Advance(9 * time.Second)
	if ok, _ := d.srv.SM.Touch(ctx, template, sb.SandboxID); !ok {
		t.Fatal("touch before the timeout")
	}
	d.clock.Advance(2 * time.Second)
	refused(t, "get after the timeout", d.call(http.MethodGet, "/sandboxes/"+sb.SandboxID, "", gatewayKey), http.StatusNotFound, sb.SandboxID)
	if _, ok, _ := d.srv.Store().SandboxGet(ctx, sb.SandboxID); ok {
		t.Fatal("the record of a gone sandbox is kept")
	}
	if n, err := d.srv.SM.ExpireSessions(ctx, template, 10); err != nil || n != 1 {
		t.Fatalf("expiry sweep: %d %v, want the sandbox's session evicted", n, err)
	}
	d.sessionGone(sb.SandboxID)
	d.info(old.SandboxID) // its 15 s are not over
}

// X-API-Key is the gateway token: missing or wrong is E2B's 401; the gateway's and the
// admin's are accepted; with no token configured every call is open. The API's and
// the sandboxes' health need no key.
func TestAPIKey(t *testing.T) {
	d := newDoor(t)
	for _, key := range []string{"", "wrong", gatewayKey + "x"} {
		refused(t, "list with key "+key, d.call(http.MethodGet, "/v2/sandboxes", "", key), http.StatusUnauthorized, "X-API-Key")
		refused(t, "create with key "+key, d.call(http.MethodPost, "/v2/sandboxes", `{"templateID":"tpl"}`, key), http.StatusUnauthorized, "X-API-Key")
	}
	for _, key := range []string{gatewayKey, adminKey} {
		if a := d.call(http.MethodGet, "/v2/sandboxes", "", key); a.status != http.StatusOK {
			t.Fatalf("list with key %s: %d %s", key, a.status, a)
		}
	}
	if a := d.call(http.MethodGet, "/health", "", ""); a.status != http.StatusNoContent {
		t.Fatalf("health: %d %s", a.status, a)
	}
	open := newDoor(t, func(c *server.Config) { c.AuthToken = "" })
	if a := open.call(http.MethodGet, "/v2/sandboxes", "", ""); a.status != http.StatusOK {
		t.Fatalf("list with no token configured: %d %s", a.status, a)
	}
}

// Bad input is E2B's 400 naming what is wrong (413 for a body over 1 MiB), an unknown
// template or sandbox its 404, and nothing is left behind.
func TestBadInput(t *testing.T) {
	d := newDoor(t)
	live := d.create(`{"templateID":"tpl"}`).SandboxID
	for _, c := range []struct {
		method, path, body string
		status             int
		says               string
	}{
		{"POST", "/v2/sandboxes", `{"templateID":`, 400, "malformed"},
		{"POST", "/v2/sandboxes", `[1]`, 400, "body"},
		{"POST", "/v2/sandboxes", `{"templateID":"Not A Scope"}`, 400, "templateID"},
		{"POST", "/v2/sandboxes", `{}`, 400, "templateID"},
		{"POST", "/v2/sandboxes", `{"templateID":"nope"}`, 404, `template "nope" not found`},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","timeout":-1}`, 400, "timeout"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","timeout":0}`, 400, "timeout"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","timeout":86401}`, 400, "timeout"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","timeout":"long"}`, 400, "body"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","envVars":{"A":"1"}}`, 400, "envVars"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","autoPause":true}`, 400, "autoPause"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","autoResume":{"enabled":true}}`, 400, "autoResume"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","network":{"denyOut":["0.0.0.0/0"]}}`, 400, "network"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","allow_internet_access":false}`, 400, "allow_internet_access"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","mcp":{"x":{}}}`, 400, "mcp"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","iam":{"tokens":{"t":{"audience":"a","tokenType":"b"}}}}`, 400, "iam"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","volumeMounts":[{"name":"v","path":"/v"}]}`, 400, "volumeMounts"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","metadata":{"k":"` + strings.Repeat("v", e2b.MaxMetadata) + `"}}`, 400, "metadata"},
		{"POST", "/v2/sandboxes", `{"templateID":"tpl","metadata":{"k":"` + strings.Repeat("v", 1<<20) + `"}}`, 413, "body"},
		{"GET", "/sandboxes/NotAnID", "", 400, "sandboxID"},
		{"DELETE", "/sandboxes/has-dash", "", 400, "sandboxID"},
		{"GET", "/sandboxes/nobody0", "", 404, `sandbox "nobody0" not found`},
		{"DELETE", "/sandboxes/nobody0", "", 404, "nobody0"},
		{"POST", "/sandboxes/nobody0/timeout", `{"timeout":5}`, 404, "nobody0"},
		{"POST", "/sandboxes/" + live + "/timeout", `{}`, 400, "timeout: required"},
		{"POST", "/sandboxes/" + live + "/timeout", ``, 400, "malformed"},
		{"POST", "/sandboxes/" + live + "/timeout", `{"timeout":-5}`, 400, "timeout"},
		{"POST", "/sandboxes/" + live + "/connect", `{}`, 400, "timeout: required"},
		{"POST", "/v2/sandboxes/" + live + "/connect", `{"timeout":99999999}`, 400, "timeout"},
		{"GET", "/v2/sandboxes?limit=0", "", 400, "limit"},
		{"GET", "/v2/sandboxes?limit=101", "", 400, "limit"},
		{"GET", "/v2/sandboxes?limit=many", "", 400, "limit"},
		{"GET", "/v2/sandboxes?order=sideways", "", 400, "order"},
		{"GET", "/v2/sandboxes?state=sleeping", "", 400, "state"},
		{"GET", "/v2/sandboxes?startedAfter=yesterday", "", 400, "startedAfter"},
		{"GET", "/v2/sandboxes?nextToken=%21%21", "", 400, "nextToken"},
		{"GET", "/v2/sandboxes?metadata=a%3D%25zz", "", 400, "metadata"},
	} {
		refused(t, c.method+" "+c.path+" "+c.body[:min(len(c.body), 60)], d.call(c.method, c.path, c.body, gatewayKey), c.status, c.says)
	}
	snap, err := d.srv.Store().Snapshot(context.Background(), template)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Sessions) != 1 || snap.Sessions[live] == "" {
		t.Fatalf("sessions after the refusals: %v, want only %s", snap.Sessions, live)
	}
	d.info(live)
}

// What warmpool does not serve answers E2B's 501 naming it; unknown routes are 404,
// a known path with another method 405, all in E2B's shape.
func TestUnsupported(t *testing.T) {
	d := newDoor(t)
	id := d.create(`{"templateID":"tpl"}`).SandboxID
	for _, c := range []struct{ method, path, says string }{
		{"POST", "/sandboxes/" + id + "/pause", "pause"},
		{"POST", "/sandboxes/" + id + "/resume", "resume"},
		{"POST", "/sandboxes/" + id + "/fork", "fork"},
		{"POST", "/sandboxes/" + id + "/snapshots", "snapshots"},
		{"POST", "/sandboxes/" + id + "/refreshes", "refreshes"},
		{"PUT", "/sandboxes/" + id + "/network", "network"},
		{"GET", "/sandboxes/" + id + "/metrics", "metrics"},
		{"GET", "/sandboxes/" + id + "/logs", "logs"},
		{"GET", "/v2/sandboxes/" + id + "/logs", "logs"},
		{"GET", "/sandboxes/metrics", "metrics"},
		{"GET", "/snapshots", "snapshots"},
		{"GET", "/templates", "templates"},
		{"POST", "/v3/templates", "templates"},
		{"GET", "/templates/" + template, "templates"},
		{"DELETE", "/templates/" + template, "templates"},
		{"GET", "/volumes", "volumes"},
		{"GET", "/teams", "teams"},
	} {
		refused(t, c.method+" "+c.path, d.call(c.method, c.path, "", gatewayKey), http.StatusNotImplemented, c.says)
	}
	refused(t, "unknown route", d.call("GET", "/whatever", "", gatewayKey), http.StatusNotFound, "no route")
	refused(t, "PUT of a sandbox", d.call("PUT", "/sandboxes/"+id, "{}", gatewayKey), http.StatusMethodNotAllowed, "PUT")
	d.info(id)
}

// GET /v2/sandboxes pages the live sandboxes newest first (or oldest first), as the
// SDK's paginator reads them (X-Next-Token until none), filtered by metadata, template,
// state and start; a sandbox whose session went another way is left out and its
// record dropped. GET /sandboxes lists them all.
func TestList(t *testing.T) {
	d := newDoor(t)
	d.putScope("other", `{"pool":{"max_concurrency":2,"pod_concurrency":2}}`)
	ctx := context.Background()
	var made []string // oldest first
	starts := map[string]time.Time{}
	for i := range 5 {
		tpl := template
		if i == 3 {
			tpl = "other"
		}
		sb := d.create(fmt.Sprintf(`{"templateID":%q,"metadata":{"n":"%d","team":"t%d"}}`, tpl, i, i%2))
		made = append(made, sb.SandboxID)
		starts[sb.SandboxID] = d.clock.Now()
		d.clock.Advance(time.Second)
	}
	page := func(query string) ([]string, string) {
		t.Helper()
		a := d.call(http.MethodGet, "/v2/sandboxes"+query, "", gatewayKey)
		if a.status != http.StatusOK {
			t.Fatalf("list %s: %d %s", query, a.status, a)
		}
		var got []detail
		a.into(t, &got)
		var ids []string
		for _, g := range got {
			if g.State != "running" || !g.StartedAt.Equal(starts[g.SandboxID]) || g.EndAt.IsZero() || g.Metadata["n"] == "" {
				t.Fatalf("list %s: %+v", query, g)
			}
			ids = append(ids, g.SandboxID)
		}
		return ids, a.header.Get("X-Next-Token")
	}
	all := func(query string) []string {
		t.Helper()
		var ids []string
		tok := ""
		for range 10 {
			q := query + "&limit=2"
			if tok != "" {
				q += "&nextToken=" + tok
			}
			got, next := page("?" + strings.TrimPrefix(q, "&"))
			ids = append(ids, got...)
			if tok = next; tok == "" {
				return ids
			}
		}
		t.Fatal("the pages do not end")
		return nil
	}
	newest := slices.Clone(made)
	slices.Reverse(newest)
	if got := all(""); !slices.Equal(got, newest) {
		t.Fatalf("pages: %v, want %v", got, newest)
	}
	if got := all("&order=asc"); !slices.Equal(got, made) {
		t.Fatalf("pages oldest first: %v, want %v", got, made)
	}
	if got := all("&metadata=team%3Dt1"); !slices.Equal(got, []string{made[3], made[1]}) {
		t.Fatalf("metadata team=t1: %v", got)
	}
	if got := all("&template=other"); !slices.Equal(got, []string{made[3]}) {
		t.Fatalf("template other: %v", got)
	}
	if got := all("&state=paused"); len(got) != 0 {
		t.Fatalf("paused: %v", got)
	}
	if got := all("&state=running,paused&startedAfter=" + starts[made[3]].Format(time.RFC3339)); !slices.Equal(got, newest[:2]) {
		t.Fatalf("started after the fourth: %v, want %v", got, newest[:2])
	}
	if got, next := page("?limit=5"); len(got) != 5 || next != "" {
		t.Fatalf("a page of all five: %v, next %q", got, next)
	}

	// The second sandbox's session ends through /v1: it is listed no more.
	if ok, err := d.srv.SM.End(ctx, template, made[1]); !ok || err != nil {
		t.Fatalf("end: %v %v", ok, err)
	}
	want := slices.DeleteFunc(slices.Clone(newest), func(id string) bool { return id == made[1] })
	if got := all(""); !slices.Equal(got, want) {
		t.Fatalf("after an end: %v, want %v", got, want)
	}
	if _, ok, _ := d.srv.Store().SandboxGet(ctx, made[1]); ok {
		t.Fatal("the listed-out sandbox's record is kept")
	}
	a := d.call(http.MethodGet, "/sandboxes?metadata=team%3Dt0", "", gatewayKey)
	var v1 []detail
	if a.into(t, &v1); a.status != http.StatusOK || len(v1) != 3 || v1[0].SandboxID != made[4] || v1[1].SandboxID != made[2] || v1[2].SandboxID != made[0] {
		t.Fatalf("v1 list team=t0: %d %s", a.status, a)
	}
}

// The SDK's sandbox traffic (E2B_SANDBOX_URL with the E2b-Sandbox-Id header, or the
// host <port>-<sandboxID>.<domain>) gets envd's health: 204 while the sandbox lives,
// 502 when it is gone; the rest of envd and other ports are 501.
func TestSandboxTraffic(t *testing.T) {
	d := newDoor(t)
	id := d.create(`{"templateID":"tpl"}`).SandboxID
	byHeader := func(sid, port string) []string {
		return []string{"E2b-Sandbox-Id: " + sid, "E2b-Sandbox-Port: " + port}
	}
	if a := d.call("GET", "/health", "", "", byHeader(id, "49983")...); a.status != http.StatusNoContent {
		t.Fatalf("envd health by header: %d %s", a.status, a)
	}
	if a := d.call("GET", "/health", "", "", "Host: 49983-"+id+".sandbox.example"); a.status != http.StatusNoContent {
		t.Fatalf("envd health by host: %d %s", a.status, a)
	}
	refused(t, "envd files", d.call("GET", "/files?path=/x", "", "", byHeader(id, "49983")...), http.StatusNotImplemented, "envd")
	refused(t, "another port", d.call("GET", "/", "", "", "Host: 8080-"+id+".sandbox.example"), http.StatusNotImplemented, "port 8080")
	refused(t, "an unknown sandbox", d.call("GET", "/health", "", "", byHeader("nobody0", "49983")...), http.StatusBadGateway, "nobody0")
	refused(t, "a malformed id", d.call("GET", "/health", "", "", byHeader("No!", "49983")...), http.StatusBadGateway, "No!")
	if a := d.call(http.MethodDelete, "/sandboxes/"+id, "", gatewayKey); a.status != http.StatusNoContent {
		t.Fatalf("kill: %d %s", a.status, a)
	}
	refused(t, "health of a killed sandbox", d.call("GET", "/health", "", "", byHeader(id, "49983")...), http.StatusBadGateway, id)
}
